"""layerprof: where the time and memory of a PyTorch model go, layer by layer.

Public API::

    prof = layerprof.profile(model, x, warmup=5, iters=50)   # -> Profile
    prof.print(depth=3); prof.save("p.json"); prof.write("report.html")
    prof.latency.median_ms                                     # explicit units (docs/python-api.md)
    layerprof.Profile.load("p.json").to_dataframe()
    with layerprof.Recorder(model) as rec:                     # your own loop
        model(x)
    rec.profile().print()
    layerprof.gate(layerprof.diff(base, new), 5.0)             # compare two profiles, gate
    layerprof.analyze("trace.json.gz").rank().print()          # a torch.profiler trace -> Run

Importing this package does not import torch; running a model does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof import sinks
from layerprof.errors import LayerprofError
from layerprof.version import __version__

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from layerprof.analysis.diff import diff
    from layerprof.analysis.gate import gate
    from layerprof.capture.options import CompileOptions, OpOptions
    from layerprof.capture.recording.loop import StepSchedule
    from layerprof.capture.recording.recorder import Recorder
    from layerprof.pivot.diff import Diff
    from layerprof.pivot.profile import Profile, Run


def _register() -> None:
    from layerprof import render  # noqa: F401  (registers the renderers)


# The renderers, the codec, numpy and the pivot load when first used, not at import:
# ``layerprof --help`` and argument errors then cost about a bare Python (a test
# checks which modules ``--help`` imports); saving and loading import the codec where
# they run (layerprof.sinks).
sinks.on_first_use(_register)


def __getattr__(name: str) -> Any:
    """The public classes, imported on first access (PEP 562)."""
    value: Any
    if name in ("Profile", "Run"):
        from layerprof.pivot.profile import Profile, Run

        value = Profile if name == "Profile" else Run
    elif name in ("Diff", "diff"):
        from layerprof.analysis.diff import diff
        from layerprof.pivot.diff import Diff

        value = Diff if name == "Diff" else diff
    elif name == "gate":
        from layerprof.analysis.gate import gate

        value = gate
    elif name == "Recorder":
        from layerprof.capture.recording.recorder import Recorder

        value = Recorder
    elif name == "StepSchedule":
        from layerprof.capture.recording.loop import StepSchedule

        value = StepSchedule
    else:
        raise AttributeError(f"module 'layerprof' has no attribute {name!r}")
    globals()[name] = value
    return value


# ``layerprof.analysis.diff`` is the function (``layerprof.diff(a, b) -> Diff``); the module
# stays importable as ``from layerprof.analysis.diff import Diff``.
__all__ = [
    "Diff",
    "LayerprofError",
    "Profile",
    "Recorder",
    "Run",
    "StepSchedule",
    "__version__",
    "analyze",
    "diff",
    "gate",
    "profile",
    "write_tensorboard",
]


def profile(
    model: torch.nn.Module,
    *args: Any,
    kwargs: dict[str, Any] | None = None,
    warmup: int = 5,
    iters: int = 50,
    threads: int | None = None,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    eval: bool = True,
    inference_mode: bool = True,
    grad: bool = False,
    correct_overhead: bool = True,
    progress: bool = False,
    ops: bool | OpOptions = False,
    backward: bool = False,
    loss: Callable[[Any], Any] | None = None,
    peak: str | None = None,
    compile: bool | CompileOptions = False,
    generate: int | None = None,
) -> Profile:
    """Profile ``model(*args, **kwargs)``: clean latency pass + per-layer pass.

    ``generate=N`` profiles ``model.generate(*args, **kwargs)`` of exactly N greedy
    new tokens instead (a Hugging Face causal LM; the prompt is the first input):
    time to first token, inter-token latency, prefill and decode tokens/s, each
    layer's time in prefill and in decode, the KV cache (``Profile.generation``);
    ``warmup`` and ``iters`` count whole generates; ``threads``, ``inference_mode``,
    ``correct_overhead``, ``peak``, ``device`` and ``dtype`` apply as to a forward, and
    ``ops``, ``backward``, ``compile``, ``eval=False`` and ``grad=True`` are refused.

    ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``) and ``dtype`` (a floating
    dtype: ``torch.bfloat16`` or ``"bfloat16"``) run the model and its inputs
    there, as ``layerprof run --device/--dtype`` do; your model is left as it is
    (a moved or cast copy is profiled). ``ops=True`` (or an
    :class:`layerprof.capture.profiling.profiler.OpOptions`) records the operators of every layer
    with torch.profiler (``Profile.ops``); ``backward=True`` adds each layer's
    backward time, with ``loss(output)`` as the loss (default: the sum of the
    floating outputs). ``compile=True`` (or a
    :class:`layerprof.capture.compiled.run.CompileOptions`) runs the model through
    ``torch.compile`` and attributes the compiled kernels' time to layers
    (``Profile.compiled`` says how); ``peak`` (``"312e12,2T"``: FLOP/s[,bytes/s])
    gives the device's peak rates for the roofline, as ``--peak``. See
    :class:`layerprof.capture.options.RunOptions` for the other options and
    docs/python-api.md for the units of what comes back.
    """
    from layerprof.capture.options import run_options
    from layerprof.capture.platform.device import placed
    from layerprof.capture.runner import profile_model

    model, args, kwargs, dev, dtype_name = placed(model, args, kwargs or {}, device, dtype)
    options = run_options(
        warmup=warmup,
        iters=iters,
        device=dev,
        threads=threads,
        dtype=dtype_name,
        eval=eval,
        inference_mode=inference_mode,
        grad=grad,
        correct_overhead=correct_overhead,
        progress=progress,
        ops=ops,
        backward=backward,
        loss=loss,
        peak=peak,
        compile=compile,
    )
    if generate is not None:  # checked as a forward's options are, and none ignored
        from layerprof.capture.generate import profile_generate
        from layerprof.capture.options import check_generate

        check_generate(options, cli=False)
        return profile_generate(
            model, args, kwargs, generate, warmup=options.warmup, iters=options.iters,
            threads=options.threads, inference_mode=options.inference_mode,
            correct=options.correct_overhead, peak=options.peak,
        )  # fmt: skip
    return profile_model(model, args, kwargs, options)


def write_tensorboard(
    profile: Profile, directory: str | os.PathLike[str], *, worker: str | None = None
) -> Path:
    """Write an ops-mode profile's trace as ``tensorboard_trace_handler`` would (one
    ``{worker}.{time}.pt.trace.json`` in ``directory``), as ``--tensorboard DIR`` does."""
    from layerprof.render.chrome import write_tensorboard_dir

    return write_tensorboard_dir(directory, profile, worker=worker)


def analyze(path: str | os.PathLike[str], **options: Any) -> Run:
    """Analyze a torch.profiler trace (``.json``, ``.json.gz``), a directory or glob of
    per-rank traces, or an fsspec URL (``s3://...``) -> a :class:`Run` (one Profile
    per rank). No torch import.

    Options as for :func:`layerprof.trace.jobs.rankjobs.analyze` (``executor="serial"``,
    ``"processes[=N]"`` or ``"dask[=ADDRESS]"``, ``partial``, ``group_by_shape``,
    ``max_input_size``, ...).
    """
    from layerprof.trace.jobs.rankjobs import analyze as analyze_trace

    return analyze_trace(path, **options)
