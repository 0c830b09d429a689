"""One recorded training run for a framework callback: start, a mark per optimizer step, finish.

The callbacks differ only in which framework event calls which of these. The
profile is written when training ends (a failed write is a warning naming the
file, and leaves training's own result alone), and kept on ``profile`` for the caller.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof.capture.recording.loop import StepSchedule
from layerprof.errors import LayerprofError, UsageError

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
        **recorder_options: Any,
    ) -> None:
        if "backward" in recorder_options:
            raise UsageError("a training callback always records backward: leave out backward=")
        if recorder_options.get("schedule") is None:
            recorder_options["schedule"] = default_schedule()
        self.path = None if path is None else Path(path)
        self.module = module
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
        if not write:
            return
        path = self.path or Path(default_dir) / "layerprof-profile.json"
        try:
            self.profile.write(path)
        except Exception as exc:  # the training ran; a failed write must not fail it
            warnings.warn(f"layerprof: could not write {path}: {exc}", RuntimeWarning, stacklevel=2)

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
