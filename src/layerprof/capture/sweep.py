"""``layerprof sweep``: the same model over batch sizes, dtypes and thread counts.

Each point of the grid is a whole run (``layerprof.capture.runner``: cold call,
warm-up, the clean latency pass, the per-layer pass and FLOP counting) on
inputs built from the ``--input`` specs with the batch dimension replaced,
plus one forward that measures how far allocated memory rises (the CUDA
allocator's peak counter; on CPU torch.profiler's allocator events).

The batch dimension is dimension ``batch_dim`` (default 0) of every shape
spec; a spec with fewer dimensions is left as it is (a note says so).
``@file`` inputs cannot be resized: with ``--batch`` they are refused.

``generate`` (``sweep --generate N``) times ``model.generate()`` of N new tokens
at each point instead of one forward (``layerprof.capture.generate``): the time
to first token, the inter-token latency and the prefill and decode tokens/s per
point; ``prompts`` adds a dimension, the prompt length, which replaces the last
dimension of every input of two or more dimensions (batch x tokens).

Order: dtype, then threads, then batch ascending. A point that runs out of
memory ends its (dtype, threads) row: the larger batches are marked skipped,
and the sweep goes on with the next row. Other failures mark the point failed
with the error's first line. The model is cast per dtype on a copy, so the
caller's model is left as it was. Notes, once per grid: where rows stopped,
layers whose shares time the unfused path (the per-layer pass did not take a
fused fast path), and points measured while the machine was busy.
"""

from __future__ import annotations

import copy
import dataclasses
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from layerprof.capture.generate import profile_generate
from layerprof.capture.memory.allocator import CudaMemory
from layerprof.capture.options import OpOptions, RunOptions
from layerprof.capture.platform.device import prepare_model
from layerprof.errors import DeviceError, InputSpecError, LayerprofError, UsageError
from layerprof.load.inputs import InputSpec, build_inputs, parse_input_spec
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import now_iso
from layerprof.pivot.sections.sweep import (
    DEFAULT_ITERS,
    DEFAULT_WARMUP,
    FAILED,
    OK,
    OUT_OF_MEMORY,
    SKIPPED,
    Sweep,
    SweepPoint,
)

if TYPE_CHECKING:
    import torch

    from layerprof.pivot.profile import Profile

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SweepOptions:
    """The grid (empty: that dimension is not varied) and how each point is measured.

    ``layers`` runs the per-layer pass (for the layers' shares); ``memory`` the
    peak-memory forward.
    """

    batches: tuple[int, ...] = ()
    dtypes: tuple[str, ...] = ()
    threads: tuple[int, ...] = ()
    batch_dim: int = 0
    device: str = "cpu"
    warmup: int = DEFAULT_WARMUP
    iters: int = DEFAULT_ITERS
    seed: int = 0
    eval: bool = True
    inference_mode: bool = True
    layers: bool = True
    memory: bool = True
    model_name: str | None = None
    kind: str = "eager"
    # the torch.export program behind ``model`` (kind "export"): run_model times its
    # layers from the program's graph; it runs only in the dtype it was exported with
    program: Any = None
    generate: int | None = None  # new tokens per generate(); None: one forward per pass
    prompts: tuple[int, ...] = ()  # prompt lengths (with generate)

    def __post_init__(self) -> None:
        if self.batch_dim < 0:
            raise UsageError(f"--batch-dim must be 0 or more (got {self.batch_dim})")
        if any(b < 1 for b in self.batches):
            raise UsageError("--batch sizes must be at least 1")
        if any(p < 1 for p in self.prompts):
            raise UsageError("--prompt lengths must be at least 1")
        if self.prompts and self.generate is None:
            raise UsageError("--prompt needs --generate N (a sweep of generate())")


def run_sweep(
    model: torch.nn.Module,
    specs: Sequence[str],
    options: SweepOptions,
    *,
    progress: Progress | None = None,
) -> Sweep:
    """Run every point of the grid; ``progress`` is told each point's label as it starts."""
    import torch

    from layerprof.capture.runner import dtype_of

    parsed = [parse_input_spec(s) for s in specs]
    notes = _check_specs(parsed, options)
    own = dtype_of(model)
    points: list[SweepPoint] = []
    facts: list[_Facts] = []
    for dtype in options.dtypes or (own,):
        if options.program is not None and dtype != own:
            notes.append(
                Note(
                    "dtype-skipped",
                    f"{dtype} skipped: a torch.export program runs in the dtype it was"
                    f" exported with ({own})",
                    {"dtype": dtype, "own": own},
                )
            )
            continue
        casted = _cast(model, options.device, dtype if dtype != own else None)
        for threads in options.threads or (None,):
            for prompt in sorted(options.prompts) or (None,):
                row, stop = _row(casted, parsed, dtype, threads, prompt, options, progress, facts)
                points += row
                if stop:
                    notes.append(stop)
        del casted
    notes += _fact_notes(facts)
    return Sweep(
        model=options.model_name or type(model).__name__,
        device=options.device,
        inputs=tuple(specs),
        batch_dim=options.batch_dim,
        points=tuple(points),
        torch=torch.__version__,
        host=socket.gethostname(),
        created=now_iso(),
        warmup=options.warmup,
        iters=options.iters,
        notes=tuple(notes),
        generate=options.generate,
    )


def _check_specs(specs: list[InputSpec], options: SweepOptions) -> list[Note]:
    if not specs:
        raise UsageError("sweep needs --input", hint="e.g. --input 8x3x224x224 --batch 1,8,32")
    if not options.batches:
        return []
    files = [s.text for s in specs if s.shape is None]
    if files:
        raise UsageError(
            f"--batch resizes shape specs; {files[0]!r} is a file and cannot be resized",
            hint="give that input as a shape spec (e.g. 8x3x224x224) or sweep without --batch",
        )
    return [
        Note(
            "no-batch-dim",
            f"input {s.text!r} has no dimension {options.batch_dim}: the same in every point",
            {"input": s.text, "batch_dim": options.batch_dim},
        )
        for s in specs
        if s.shape is not None and len(s.shape) <= options.batch_dim
    ]


def _cast(model: Any, device: str, dtype: str | None) -> Any:
    """The model on ``device`` in ``dtype``: a copy when it is cast, so the caller's
    weights keep their precision for the next dtype."""
    return prepare_model(copy.deepcopy(model) if dtype else model, device, dtype)


def _row(
    model: Any,
    specs: list[InputSpec],
    dtype: str,
    threads: int | None,
    prompt: int | None,
    options: SweepOptions,
    progress: Progress | None,
    facts: list[_Facts],
) -> tuple[list[SweepPoint], Note | None]:
    """One (dtype, threads, prompt) row over the batches; the note where it stopped.
    What each point's run found that the numbers depend on goes to ``facts``."""
    out: list[SweepPoint] = []
    stopped: SweepPoint | None = None
    batches: list[int | None] = [*sorted(options.batches)] or [None]
    for batch in batches:
        point = SweepPoint(batch, dtype, threads, prompt=prompt)
        if stopped is not None:
            out.append(
                dataclasses.replace(
                    point, status=SKIPPED, reason=f"{stopped.label} ran out of memory"
                )
            )
            continue
        if progress is not None:
            progress(point.label)
        point, fact = _point(model, specs, point, options)
        out.append(point)
        if fact is not None:
            facts.append(fact)
        if point.status == OUT_OF_MEMORY:
            stopped = point
    if stopped is None:
        return out, None
    larger = [p.batch for p in out if p.status == SKIPPED]
    rest = f"; batches {', '.join(map(str, larger))} not tried" if larger else ""
    return out, Note(
        "out-of-memory",
        f"{stopped.label}: out of memory ({stopped.reason}){rest}",
        {"point": stopped.label},
    )


@dataclass(frozen=True)
class _Facts:
    """What one point's run recorded beside its numbers: layers whose per-layer pass
    ran other code than the clean pass, and how busy the machine was."""

    label: str
    diverged: tuple[str, ...]
    load: float | None
    cpus: int | None


def _facts(point: SweepPoint, profile: Profile) -> _Facts:
    extra = profile.meta.extra
    load, cpus = extra.get("load_avg"), extra.get("cpus")
    return _Facts(
        point.label,
        profile.passes.diverged if profile.passes is not None else (),
        float(load) if isinstance(load, (int, float)) else None,
        cpus if isinstance(cpus, int) else None,
    )


def _fact_notes(facts: list[_Facts]) -> list[Note]:
    """One note per kind of fact over the whole grid (not one per point)."""
    notes: list[Note] = []
    diverged = list(dict.fromkeys(p for f in facts for p in f.diverged))
    if diverged:
        names = ", ".join(diverged[:3]) + (
            f" and {len(diverged) - 3} more" if len(diverged) > 3 else ""
        )
        notes.append(
            Note(
                "unfused-shares",
                f"the layer shares of {names} time the unfused path: the per-layer pass did"
                " not take torch's fused fast path there, while latency and throughput are"
                " the fused path's (see `layerprof run` findings)",
                {"layers": tuple(diverged)},
            )
        )
    busy = [f for f in facts if f.load is not None and f.cpus is not None and f.load > f.cpus]
    if busy:
        worst = max(busy, key=lambda f: f.load or 0.0)
        labels = "; ".join(f.label for f in busy[:4]) + ("; ..." if len(busy) > 4 else "")
        notes.append(
            Note(
                "busy-machine",
                f"the machine was busy at {len(busy)} of {len(facts)} points ({labels}):"
                f" 1-minute load average up to {worst.load:.1f} on {worst.cpus} CPUs (this"
                " sweep included); their latencies may be inflated by other processes",
                {"points": len(busy), "load": worst.load, "cpus": worst.cpus},
            )
        )
    return notes


def _point(
    model: Any, specs: list[InputSpec], point: SweepPoint, options: SweepOptions
) -> tuple[SweepPoint, _Facts | None]:
    from layerprof.capture.runner import run_model

    sized = [_prompted(_resized(s, point.batch, options.batch_dim), point.prompt) for s in specs]
    try:
        inputs = build_inputs(
            sized, device=options.device, float_dtype=point.dtype, seed=options.seed
        )
        run = RunOptions(
            warmup=options.warmup, iters=options.iters, device=options.device,
            threads=point.threads, eval=options.eval, inference_mode=options.inference_mode,
            model_name=options.model_name, input_descriptions=tuple(inputs.descriptions),
            dtype=point.dtype, layers=options.layers, kind=options.kind,
        )  # fmt: skip
        if options.generate is not None:
            profile = profile_generate(
                model, tuple(inputs.args), dict(inputs.kwargs), options.generate,
                warmup=run.warmup, iters=run.iters, threads=run.threads,
            )  # fmt: skip
        else:
            profile = run_model(
                model, tuple(inputs.args), dict(inputs.kwargs), run, program=options.program
            )
        peak = _peak_memory(model, inputs.args, inputs.kwargs, options) if options.memory else None
    except (KeyboardInterrupt, UsageError, DeviceError):
        raise
    except Exception as exc:
        _free(options.device)
        status = OUT_OF_MEMORY if is_out_of_memory(exc) else FAILED
        reason = _first_line(exc)
        if options.program is not None and "Guard failed" in reason:
            reason = (
                "the torch.export program was exported for other input shapes"
                f" ({reason.rsplit('Guard failed: ', 1)[-1]}); export it with a dynamic"
                " batch dimension (torch.export.Dim) to sweep the batch"
            )
        return dataclasses.replace(point, status=status, reason=reason), None
    measured = _measured(point, profile, peak, _batch_of(sized, point.batch, options.batch_dim))
    return measured, _facts(point, profile)


def _prompted(spec: InputSpec, prompt: int | None) -> InputSpec:
    """The spec with its last dimension (the tokens of a batch x tokens input) set to
    ``prompt``; inputs of fewer than two dimensions stay as they are."""
    if prompt is None or spec.shape is None or len(spec.shape) < 2:
        return spec
    resized = dataclasses.replace(spec, shape=(*spec.shape[:-1], prompt))
    return dataclasses.replace(resized, text=resized.canonical)


def _resized(spec: InputSpec, batch: int | None, dim: int) -> InputSpec:
    if batch is None or spec.shape is None or len(spec.shape) <= dim:
        return spec
    shape = (*spec.shape[:dim], batch, *spec.shape[dim + 1 :])
    resized = dataclasses.replace(spec, shape=shape)
    return dataclasses.replace(resized, text=resized.canonical)


def _batch_of(specs: list[InputSpec], batch: int | None, dim: int) -> int | None:
    """The batch of a point: the one set, else the first input's size along ``dim``."""
    if batch is not None:
        return batch
    for s in specs:
        if s.shape is not None and len(s.shape) > dim:
            return s.shape[dim]
    return None


def _measured(
    point: SweepPoint, profile: Profile, peak: int | None, batch: int | None
) -> SweepPoint:
    latency = profile.latency
    rows = profile.rows()
    whole = sum(r.total_ns for r in rows if r.parent is None)
    shares = sorted(
        (
            (r.path, min(r.self_ns / whole, 1.0))
            for r in rows
            if r.calls and r.self_ns > 0 and whole > 0
        ),
        key=lambda kv: -kv[1],
    )
    rate = (
        batch / latency.median * 1e9
        if latency is not None and batch and latency.median > 0
        else None
    )
    g = profile.generation
    if g is not None:  # a generate: its whole call is the latency, its rates the throughput
        return dataclasses.replace(
            point, status=OK, latency=g.generate_ns.summary if g.generate_ns else None,
            peak_bytes=peak, shares=tuple(shares),
            ttft=g.ttft_ns.summary if g.ttft_ns else None,
            itl=g.itl_ns.summary if g.itl_ns else None,
            prefill_tokens_per_s=g.prefill_tokens_per_s,
            decode_tokens_per_s=g.decode_tokens_per_s,
        )  # fmt: skip
    return dataclasses.replace(
        point,
        status=OK,
        latency=latency,
        samples_per_s=rate,
        peak_bytes=peak,
        flops=profile.flops.forward if profile.flops is not None else None,
        shares=tuple(shares),
    )


def _peak_memory(model: Any, args: Any, kwargs: Any, options: SweepOptions) -> int | None:
    """How far allocated memory rises in one forward, above where it started."""
    import contextlib

    import torch

    was_training = getattr(model, "training", False)
    if options.eval:
        model.eval()
    grad: contextlib.AbstractContextManager[Any] = (
        torch.inference_mode() if options.inference_mode else torch.no_grad()
    )
    try:
        if options.device.startswith("cuda"):
            counter = CudaMemory(options.device)
            torch.cuda.synchronize(options.device)
            base = counter.allocated()
            counter.reset_peak()
            with grad:
                model(*args, **kwargs)
            torch.cuda.synchronize(options.device)
            return max(counter.peak() - base, 0)
        return _cpu_peak(model, args, kwargs, options)
    finally:
        model.train(was_training)


def _cpu_peak(model: Any, args: Any, kwargs: Any, options: SweepOptions) -> int | None:
    """The CPU allocator has no peak counter: torch.profiler's memory events have it."""
    import torch

    from layerprof.capture.profiling.profiler import capture_ops

    grad = torch.inference_mode if options.inference_mode else torch.no_grad
    raw = capture_ops(
        model, tuple(args), dict(kwargs), iters=1, device="cpu",
        options=OpOptions(profile_memory=True), grad_ctx_factory=grad,
    )  # fmt: skip
    memory = raw.profile().trace.memory
    if memory is None:
        return None
    peaks = [d.peak_allocated for d in memory.devices if d.device.startswith("cpu")]
    return max(peaks) if peaks else None


_OOM_WORDS = ("out of memory", "can't allocate memory", "not enough memory", "memory available")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) says memory ran out."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ == "OutOfMemoryError" or isinstance(current, MemoryError):
            return True
        text = str(current).lower()
        if isinstance(current, (RuntimeError, InputSpecError, LayerprofError)) and any(
            w in text for w in _OOM_WORDS
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def _free(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]
