"""How to run the model: the options every mode reads, checked when they are made.

``RunOptions`` (and ``run_options``, which builds it alike for ``layerprof.profile()``
and ``layerprof run``), with the option types of the modes it carries: ``OpOptions``
(``--ops``), ``CompileOptions`` (``--compile``) and ``GivenPeak`` (``--peak``). Its own
module, below the runner and the modes and importing none of them, so that each mode
can name its options without a circle.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from layerprof.errors import UsageError
from layerprof.load.limits import threads_problem
from layerprof.pivot.sections.compiled import SPLIT_RULES
from layerprof.units import parse_si


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
        for name in ("warmup", "iters", "threads"):
            value = getattr(self, name)
            # the Python API's arguments arrive untyped: "3" would fail deep inside as a
            # bare TypeError ('<' not supported between 'str' and 'int')
            if not (value is None and name == "threads") and (
                isinstance(value, bool) or not isinstance(value, numbers.Integral)
            ):
                raise UsageError(f"{name} must be a whole number (got {value!r})")
            if value is not None and not isinstance(value, int):  # numpy's: JSON takes int
                object.__setattr__(self, name, int(value))
        if self.iters < 1:
            raise UsageError(f"iters must be at least 1 (got {self.iters})")
        if self.warmup < 0:
            raise UsageError(f"warmup cannot be negative (got {self.warmup})")
        if self.threads is not None and (problem := threads_problem(self.threads)) is not None:
            raise UsageError(f"threads: {problem}")
        if self.peak is not None and not isinstance(self.peak, GivenPeak):
            raise UsageError(
                f"peak must be FLOPS[,BYTES] per second text such as '2.5T,50G' (got {self.peak!r})"
            )
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


def run_options(
    *,
    warmup: int,
    iters: int,
    device: str | None,
    threads: int | None,
    dtype: str | None,
    eval: bool,
    inference_mode: bool,
    grad: bool,
    correct_overhead: bool,
    progress: bool,
    ops: bool | OpOptions | None,
    backward: bool,
    loss: Callable[[Any], Any] | None,
    peak: str | GivenPeak | None,
    compile: bool | CompileOptions | None,
    model_name: str | None = None,
    input_descriptions: tuple[str, ...] = (),
    kind: str = "eager",
    meta_extra: dict[str, Any] | None = None,
) -> RunOptions:
    """The RunOptions of ``layerprof.profile()`` and of ``layerprof run``/``demo``, built
    by this one function so that both read the user's choices alike. The measurement
    choices have no defaults here: each caller keeps its own (the function's signature,
    the command's options). ``ops`` and ``compile`` are a flag or their options, ``peak``
    the ``--peak`` text or its parsed value."""
    return RunOptions(
        warmup=warmup, iters=iters, device=device, threads=threads, dtype=dtype, eval=eval,
        inference_mode=inference_mode, grad=grad, correct_overhead=correct_overhead,
        progress=progress, backward=backward, loss=loss, model_name=model_name,
        input_descriptions=input_descriptions, kind=kind, meta_extra=dict(meta_extra or {}),
        ops=ops if isinstance(ops, OpOptions) else (OpOptions() if ops else None),
        compile=compile if isinstance(compile, CompileOptions) else (CompileOptions() if compile else None),
        peak=parse_peak(peak) if isinstance(peak, str) else peak,
    )  # fmt: skip


#: What a generate cannot honour, by RunOptions field: the option's name in the Python API
#: and on the command line, and why (the others it honours: threads, inference_mode,
#: correct_overhead, peak, dtype, device).
_NOT_WITH_GENERATE = {
    "ops": ("ops=", "--ops", "operators are not recorded per phase yet"),
    "backward": ("backward=True", "--backward", "generate() has no backward"),
    "compile": (
        "compile=", "--compile", "compile the model yourself (model.compile()) and profile that"
    ),
    "eval": ("eval=False", "--train", "generate() is inference: the model runs in eval mode"),
    "grad": ("grad=True", "--grad", "transformers runs generate() under torch.no_grad()"),
}  # fmt: skip


def check_generate(options: RunOptions, *, cli: bool) -> None:
    """Refuse, in one line naming the option (``--train`` or ``eval=False``), a run option
    that a generate would otherwise silently ignore."""
    given = {
        "ops": options.ops is not None, "backward": options.backward,
        "compile": options.compile is not None, "eval": not options.eval, "grad": options.grad,
    }  # fmt: skip
    for field_name, on in given.items():
        if on:
            api, flag, why = _NOT_WITH_GENERATE[field_name]
            what = (
                f"--generate does not go with {flag}"
                if cli
                else f"generate= does not go with {api}"
            )
            raise UsageError(f"{what}: {why}")


@dataclass(frozen=True)
class OpOptions:
    """What ``torch.profiler`` records besides op names and times.

    ``record_shapes``: input shapes per op (and group-by-shape tables);
    ``profile_memory``: allocator events; ``with_stack``: Python stacks in the
    trace; ``with_flops``: FLOP estimates of matmul/conv ops in the trace;
    ``schedule``: ``(wait, warmup, active, repeat)`` as for
    ``torch.profiler.schedule``: only active steps are recorded.
    """

    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    schedule: tuple[int, int, int, int] | None = None

    def meta(self) -> dict[str, Any]:
        """What a profile's meta records about ops mode (``meta.extra["ops"]``): the
        options that were on, and the schedule as ``{wait, warmup, active, repeat}``."""
        on = [
            k
            for k in ("record_shapes", "profile_memory", "with_stack", "with_flops")
            if getattr(self, k)
        ]
        out: dict[str, Any] = {"options": on}
        if self.schedule is not None:
            out["schedule"] = dict(
                zip(("wait", "warmup", "active", "repeat"), self.schedule, strict=True)
            )
        return {"ops": out}


#: The inductor modes the compiled view supports, and those it refuses.
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


@dataclass(frozen=True)
class CompileOptions:
    """``mode``: inductor's mode; ``dynamic``: ``torch.compile(dynamic=)``;
    ``split``: how a fused kernel spanning several modules is split
    (``cost``: by the nodes' FLOPs or elements; ``lca``: all to the modules'
    common ancestor; ``equal``: evenly)."""

    mode: str = "default"
    dynamic: bool | None = None
    split: str = "cost"

    def __post_init__(self) -> None:
        if self.mode in CUDA_GRAPH_MODES:
            raise UsageError(
                f"--compile-mode {self.mode} replays CUDA graphs, which hide each kernel from"
                " the profiler, so its time cannot be attributed to layers",
                hint="use --compile-mode max-autotune-no-cudagraphs (or default)",
            )
        if self.mode not in COMPILE_MODES:
            raise UsageError(
                f"--compile-mode {self.mode!r} is not one of {', '.join(COMPILE_MODES)}",
            )
        if self.split not in SPLIT_RULES:
            raise UsageError(
                f"--compile-split {self.split!r} is not one of {', '.join(SPLIT_RULES)}"
            )


@dataclass(frozen=True)
class GivenPeak:
    """``--peak``: FLOP/s and, optionally, bytes/s."""

    flops_per_s: float
    bytes_per_s: float | None = None


def parse_peak(text: str) -> GivenPeak:
    """``"2.5T"`` or ``"2.5T,50G"`` -> GivenPeak; UsageError naming the problem."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 2 or not parts[0]:
        raise UsageError(
            f"--peak {text!r}: expected FLOPS[,BYTES] per second", hint="e.g. --peak 2.5T,50G"
        )
    try:
        rates = [parse_si(p) for p in parts]
    except ValueError as exc:
        raise UsageError(f"--peak: {exc}", hint="e.g. --peak 2.5T,50G") from None
    return GivenPeak(rates[0], rates[1] if len(rates) > 1 else None)
