"""How to run the model: the options every mode reads, checked when they are made.

Its own module, below the runner and the modes, so that each mode can name it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from layerprof.errors import UsageError
from layerprof.load.limits import threads_problem

if TYPE_CHECKING:
    from layerprof.capture.compiled.run import CompileOptions
    from layerprof.capture.flops.peaks import GivenPeak
    from layerprof.capture.ops.profiler import OpOptions


@dataclass(frozen=True)
class RunOptions:
    """How to run the model.

    ``eval`` puts the model in eval mode for the run (restored after);
    ``inference_mode`` runs under ``torch.inference_mode()`` (else
    ``torch.no_grad()`` unless ``grad`` is set); ``correct_overhead`` removes
    the calibrated hook cost from host self times; ``progress`` shows a bar on
    stderr once a run takes more than a second. ``ops`` switches the per-layer
    pass to ops mode (torch.profiler, ops attributed to layer paths);
    ``backward`` adds each layer's backward time (``loss`` maps the output to
    the loss; default: sum of floating outputs). ``kind`` is ``eager``,
    ``torchscript`` or ``export`` (per-layer rows from the profiler's module
    hierarchy / the graph's ``nn_module_stack``); ``layers=False`` measures
    the latency only; ``peak`` (``--peak``) gives the device's peak rates for
    the roofline instead of the measured (CPU) or looked-up (CUDA) ones.
    the latency only. ``compile`` runs the model through ``torch.compile``
    and attributes the compiled kernels' time to layers.
    """

    warmup: int = 5
    iters: int = 50
    device: str | None = None
    threads: int | None = None
    eval: bool = True
    inference_mode: bool = True
    grad: bool = False
    correct_overhead: bool = True
    progress: bool = False
    model_name: str | None = None
    input_descriptions: tuple[str, ...] = ()
    dtype: str | None = None
    layers: bool = True
    ops: OpOptions | None = None
    backward: bool = False
    loss: Callable[[Any], Any] | None = None
    kind: str = "eager"
    compile: CompileOptions | None = None
    meta_extra: dict[str, Any] = field(default_factory=dict)
    peak: GivenPeak | None = None

    def __post_init__(self) -> None:
        if self.iters < 1:
            raise UsageError(f"iters must be at least 1 (got {self.iters})")
        if self.warmup < 0:
            raise UsageError(f"warmup cannot be negative (got {self.warmup})")
        if self.threads is not None and (problem := threads_problem(self.threads)) is not None:
            raise UsageError(f"threads: {problem}")
        if self.backward and self.kind != "eager":
            raise UsageError(
                f"--backward is not available for {self.kind} models",
                hint="profile the eager model (state_dict + --arch) for per-layer backward times",
            )
        if self.compile is not None and (self.kind != "eager" or self.ops is not None):
            what = "--ops" if self.kind == "eager" else f"a {self.kind} model"
            raise UsageError(
                f"--compile cannot be combined with {what}",
                hint="--compile profiles an eager nn.Module through torch.compile on its own",
            )
