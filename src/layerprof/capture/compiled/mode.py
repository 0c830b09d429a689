"""``--compile`` as a mode: the clean pass times the compiled model, the layer pass attributes.

The compiled run (``capture.compiled.run``) is entered around the whole run,
so the cold call pays the compile and every timed forward runs compiled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from layerprof.capture.compiled.run import CompiledRun
    from layerprof.capture.layerpass import LayerMode, Pass
    from layerprof.capture.options import RunOptions
    from layerprof.pivot.profile import Profile


class CompiledMode:
    """An eager ``nn.Module`` run through torch.compile, its kernels attributed to layers."""

    @staticmethod
    def wants(opts: RunOptions) -> bool:
        return opts.compile is not None

    @classmethod
    def start(
        cls, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], opts: RunOptions
    ) -> LayerMode:
        from layerprof.capture.compiled.run import CompiledRun

        assert opts.compile is not None
        return cls(CompiledRun(model, args, kwargs, opts.compile))

    def __init__(self, compiled: CompiledRun) -> None:
        self.compiled = compiled

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return self.compiled

    def subject(self, model: Any, forward: Callable[[], Any]) -> tuple[Any, Callable[[], Any]]:
        return self.compiled.model, self.compiled.forward

    def layer_pass(self, run: Pass) -> Profile:
        run.progress.close()
        opts = run.opts
        return self.compiled.layer_pass(
            run.base, iters=opts.iters, device=run.device, backward=opts.backward,
            loss=opts.loss, peak=opts.peak,
        )  # fmt: skip
