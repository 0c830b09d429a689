"""One recorded training run for a framework callback: start, a mark per optimizer step, finish.

The callbacks differ only in which framework event calls which of these. The
profile is written when training ends (a failed write is a warning naming the
file, and leaves training's own result alone), and kept on ``profile`` for the caller.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from layerprof.capture.recording.recorder import Recorder
    from layerprof.profile import Profile


class TrainingSession:
    """A ``Recorder(model, backward=True)`` around a framework's training loop."""

    def __init__(self, path: str | os.PathLike[str] | None, **recorder_options: Any) -> None:
        self.path = None if path is None else Path(path)
        self.options = recorder_options
        self.recorder: Recorder | None = None
        self.profile: Profile | None = None

    def start(self, model: Any) -> None:
        """Hooks on ``model`` (the framework's unwrapped module), recording from now on."""
        from layerprof.capture.recording.recorder import Recorder

        self.finish(write=False)  # a second train() call starts a new recording
        self.recorder = Recorder(model, backward=True, **self.options)
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
        self.profile = rec.profile()
        if not write:
            return
        path = self.path or Path(default_dir) / "layerprof-profile.json"
        try:
            self.profile.write(path)
        except Exception as exc:  # the training ran; a failed write must not fail it
            warnings.warn(f"layerprof: could not write {path}: {exc}", RuntimeWarning, stacklevel=2)
