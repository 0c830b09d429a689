"""One recorded training run for a framework callback: start, a mark per optimizer step, finish.

The callbacks differ only in which framework event calls which of these. The
profile is written when training ends (a failed write is a warning naming the
file, and leaves training's own result alone), and kept on ``profile`` for the caller.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof.capture.recording.loop import StepSchedule
from layerprof.errors import LayerprofError, UsageError
from layerprof.pivot.notes import Note

if TYPE_CHECKING:
    from layerprof.capture.recording.recorder import Recorder
    from layerprof.pivot.profile import Profile


def default_schedule() -> Any:
    """A callback's steps unless ``schedule=`` says otherwise: the first step (cold:
    allocator growth, kernel selection) dropped, the next 200 kept, nothing after, so a
    run of 100k steps holds what 200 hold (torch.profiler users bound theirs the same
    way, with wait/warmup/active). ``schedule=StepSchedule()`` records every step."""

    return StepSchedule(warmup=1, active=200)


class TrainingSession:
    """A ``Recorder(model, backward=True)`` around a framework's training loop."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        module: Callable[[Any], Any] | str | None = None,
        *,
        owner: str = "LayerprofCallback",
        **recorder_options: Any,
    ) -> None:
        """``owner``: the callback's class name, for the hint that names ``module=``."""
        if "backward" in recorder_options:
            raise UsageError("a training callback always records backward: leave out backward=")
        if recorder_options.get("schedule") is None:
            recorder_options["schedule"] = default_schedule()
        self.path = None if path is None else Path(path)
        self.module = module
        self.owner = owner
        self.options = recorder_options
        self.recorder: Recorder | None = None
        self.profile: Profile | None = None

    def start(self, model: Any) -> None:
        """Hooks on ``model`` (the framework's unwrapped module), recording from now on."""
        from layerprof.capture.recording.recorder import Recorder

        self.finish(write=False)  # a second train() call starts a new recording
        self.recorder = Recorder(self._recorded(model), backward=True, **self.options)
        self.recorder.__enter__()

    def step(self) -> None:
        """One optimizer step ended."""
        if self.recorder is not None:
            self.recorder.step()

    def finish(self, *, write: bool = True, default_dir: str | os.PathLike[str] = ".") -> None:
        """Hooks off; the profile kept and, with ``write``, saved (JSON, or the format the
        file name says)."""
        rec, self.recorder = self.recorder, None
        if rec is None:
            return
        rec.__exit__(None, None, None)
        try:
            self.profile = rec.profile()
        except LayerprofError as exc:  # e.g. no step was active: training itself went well
            warnings.warn(f"layerprof: no profile: {exc}", RuntimeWarning, stacklevel=2)
            self.profile = None
            return
        self._name_the_part(rec.model)
        if not write:
            return
        path = self.path or Path(default_dir) / "layerprof-profile.json"
        try:
            self.profile.write(path)
        except Exception as exc:  # the training ran; a failed write must not fail it
            warnings.warn(f"layerprof: could not write {path}: {exc}", RuntimeWarning, stacklevel=2)

    def _name_the_part(self, model: Any) -> None:
        """When no step ran the recorded model's own forward (a ``training_step`` that
        calls ``self.net(x)``: no layers, forward and backward 0), say which ``module=``
        to pass, naming the model's parts that hold parameters, in a warning and in the
        profile's note: the note alone told a callback user to 'record that submodule'."""
        prof = self.profile
        if prof is None or self.module is not None:
            return
        found = [i for i, n in enumerate(prof.notes) if n.kind == "no-model-forward"]
        parts = [
            name
            for name, child in model.named_children()
            if next(child.parameters(), None) is not None
        ]
        if not found or not parts:
            return
        hint = f"{self.owner}(module={parts[0]!r})"
        if len(parts) > 1:
            hint += f" (its parts with parameters: {', '.join(parts)})"
        note = prof.notes[found[0]]
        notes = (
            *prof.notes[: found[0]],
            Note(note.kind, f"{note.text}: {hint}", {**note.data, "parts": parts}),
            *prof.notes[found[0] + 1 :],
        )
        self.profile = replace(prof, notes=notes)  # a Profile is frozen: a new one
        warnings.warn(
            f"layerprof: no training step ran {type(model).__name__}'s own forward, so the"
            f" profile has no layers: record the part the training step calls, {hint}",
            RuntimeWarning,
            stacklevel=3,
        )

    def _recorded(self, model: Any) -> Any:
        """The module to record: the framework's model, or the part ``module`` names (a
        ``training_step`` that calls ``self.net(x)`` never runs the LightningModule's own
        forward, and a step counts the recorded module's forwards)."""
        if self.module is None:
            return model
        if callable(self.module):
            return self.module(model)
        found = model
        for name in self.module.split("."):
            found = getattr(found, name, None)
            if found is None:
                raise UsageError(f"module={self.module!r}: the model has no {name!r}")
        return found
