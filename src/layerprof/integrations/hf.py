"""Hugging Face ``Trainer``: per-layer forward/backward and the step anatomy of its loop.

    from layerprof.integrations.hf import LayerprofCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[LayerprofCallback("profile.json")])
    trainer.train()   # writes profile.json (default: output_dir/layerprof-profile.json)

A step is one optimizer step (``on_step_end``), so gradient accumulation's
several forwards and backwards fall in one step. Install with
``pip install 'layerprof[hf]'``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from layerprof.integrations.session import TrainingSession


class LayerprofCallback(TrainerCallback):  # type: ignore[misc]  # untyped base
    """Records the model while ``Trainer.train()`` runs; the Profile is on ``.profile``."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        module: Callable[[Any], Any] | str | None = None,
        **recorder_options: Any,
    ):
        self.session = TrainingSession(path, module, **recorder_options)

    @property
    def profile(self) -> Any:
        return self.session.profile

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs.get("model")
        if model is None:
            raise ValueError("layerprof: the Trainer passed no model to on_train_begin")
        self.session.start(model)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.session.finish(default_dir=args.output_dir)
        else:  # every rank records; rank 0 writes (a file per rank would clash)
            self.session.finish(write=False)

    def close(self) -> None:
        """Remove the hooks without writing: the Trainer calls no callback when training
        raises, so call this (or ``train()`` again) after a failed ``train()``."""
        self.session.finish(write=False)
