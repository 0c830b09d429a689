"""Lightning: per-layer forward/backward and the step anatomy of ``Trainer.fit``.

    from layerprof.integrations.lightning import LayerprofCallback
    trainer = L.Trainer(callbacks=[LayerprofCallback("profile.json")])
    trainer.fit(module, loader)   # writes profile.json (default: default_root_dir/...)

A step is one optimizer step: a batch ends a step when ``trainer.global_step``
moved, so ``accumulate_grad_batches`` batches fall in one step. Install with
``pip install 'layerprof[lightning]'``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from lightning.pytorch.callbacks import Callback

from layerprof.integrations.session import TrainingSession


class LayerprofCallback(Callback):  # type: ignore[misc]  # untyped base
    """Records the LightningModule while it trains; the Profile is on ``.profile``."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        module: Callable[[Any], Any] | str | None = None,
        **recorder_options: Any,
    ):
        super().__init__()
        self.session = TrainingSession(path, module, **recorder_options)
        self._steps = 0

    @property
    def profile(self) -> Any:
        return self.session.profile

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._steps = trainer.global_step
        self.session.start(pl_module)

    def on_train_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        if trainer.global_step != self._steps:
            self._steps = trainer.global_step
            self.session.step()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Training raised or was interrupted (Lightning catches Ctrl-C): hooks off, no file."""
        self.session.finish(write=False)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        write = trainer.is_global_zero  # every rank records; rank 0 writes
        self.session.finish(write=write, default_dir=trainer.default_root_dir)
