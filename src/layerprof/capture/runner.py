"""Honest measurement of a live model: clean latency pass + instrumented pass.

Order of one run (see docs/definitions.md):

1. cold call — the first forward, timed alone (``first``);
2. warm-up — ``warmup`` forwards, not timed;
3. latency — ``iters`` forwards with no hooks, one device synchronize per
   iteration on CUDA, wall time of each;
4. code path — one watched forward that notes fused fast paths without changing
   them (layerprof.capture.fastpath), compared with the per-layer pass at the end;
   shapes — one forward with shape hooks; one counting FLOPs, bytes and op time
   per layer (layerprof.capture.flops.counter; with ``backward`` also one counted
   training step, and one counting the bytes each layer saves for backward,
   layerprof.capture.memory.activations); on CUDA one reading the allocator's peaks;
5. hooks mode: calibration — the hooks' own per-call cost, measured on a model
   of empty layers with the same hooks — then one untimed hooked forward and
   ``iters`` hooked forwards (plus the backward pass with ``backward``);
   ops mode instead: ``iters`` forwards under torch.profiler (layerprof.capture.ops.profiler);
   TorchScript / torch.export: the profiler's module hierarchy (layerprof.capture.scripted.profiler);
   ``compile``: the model runs compiled from the cold call on (which pays the
   compile), and its kernels are attributed to layers (layerprof.capture.compiled.run).

Hooks, threads and train/eval mode are restored in ``finally``, also when
the model raises or the user presses Ctrl-C.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from layerprof.capture.clocks import CudaEventClock, HostClock, synchronizer
from layerprof.capture.compilewatch import CompileWatch
from layerprof.capture.device import device_of
from layerprof.capture.distributed import unwrap
from layerprof.capture.failures import locate_failure, model_error
from layerprof.capture.fastpath import check_passes, watch_clean_path
from layerprof.capture.hooks.recorder import Recorder, ShapeCapture, calibrate, layer_infos
from layerprof.capture.hostload import host_load
from layerprof.capture.modules import hookable_modules
from layerprof.capture.progress import Progress
from layerprof.errors import ModelRunError, UsageError
from layerprof.load.limits import threads_problem
from layerprof.load.modulegraph import check_acyclic
from layerprof.records import LayerInfo, LayerSamples, Meta, OpStat, Overhead
from layerprof.stats import Series, median
from layerprof.units import human_time

if TYPE_CHECKING:
    import torch

    from layerprof.capture.compiled.run import CompileOptions
    from layerprof.capture.flops.counter import FlopCount
    from layerprof.capture.flops.peaks import GivenPeak
    from layerprof.capture.memory.allocator import MemoryCounter
    from layerprof.capture.ops.cost import OpsCorrection
    from layerprof.capture.ops.profiler import OpOptions, RawTrace
    from layerprof.profile import Profile
    from layerprof.sections.flops import FlopSummary
    from layerprof.sections.memory import ActivationMemory


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


def profile_model(
    model: torch.nn.Module,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    options: RunOptions | None = None,
) -> Profile:
    """Run the whole measurement and return a Profile."""
    return run_model(model, args, kwargs, options)


def run_model(
    model: torch.nn.Module,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    options: RunOptions | None = None,
    *,
    program: Any = None,
) -> Profile:
    """Cold call, warm-up, clean latency pass, then the per-layer pass the options ask for.

    ``program`` is the ``torch.export.ExportedProgram`` behind ``model`` when
    ``options.kind == "export"``. In ops mode (and for TorchScript / export)
    the Profile's ``events`` hold the recorded trace, for the trace exports.
    """
    opts = options or RunOptions()
    kwargs = kwargs or {}
    check_acyclic(model)  # eval()/train() recurse forever on a looping module tree
    device = opts.device or _infer_device(model, args, kwargs)
    sync = synchronizer(device)
    forward = _forward(model, args, kwargs)
    watch = CompileWatch()  # torch.compile recompiles inside the timed forwards
    compiled = _compiled_run(model, args, kwargs, opts)
    with _run_state(model, opts, device), compiled or contextlib.nullcontext():
        progress = Progress(enabled=opts.progress, total=1 + opts.warmup + 2 * opts.iters)
        if compiled is not None:
            model, forward = compiled.model, compiled.forward
        try:
            first_ns, latency = _latency_pass(forward, sync, model, opts, progress, watch)
            base = _base_profile(model, opts, device, latency, first_ns, args, kwargs)
            if not opts.layers:
                profile = base
            elif compiled is not None:
                progress.close()
                profile = compiled.layer_pass(
                    base, iters=opts.iters, device=device, backward=opts.backward,
                    loss=opts.loss, peak=opts.peak,
                )  # fmt: skip
            elif opts.kind != "eager":
                profile = _scripted(model, program, args, kwargs, opts, base, device).with_notes(
                    f"FLOPs not counted: a {_KIND_NAMES.get(opts.kind, opts.kind)} runs"
                    " its ops outside the Python modules the counter follows; run the eager"
                    " model (--arch) for FLOPs and the roofline"
                )
            else:
                profile = _layer_pass(
                    model, args, kwargs, forward, sync, device, opts, progress, base, watch
                )
        finally:
            progress.close()
    return profile.with_notes(*watch.notes(), *_wrapper_notes(model))


def _wrapper_notes(model: Any) -> list[str]:
    from layerprof.capture.distributed import wrapper_note

    note = wrapper_note(model)
    return [note] if note else []


_KIND_NAMES = {"torchscript": "TorchScript model", "export": "torch.export program"}


def _compiled_run(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], opts: RunOptions
) -> Any:
    """The compiled run of ``--compile`` (layerprof.capture.compiled.run), or None."""
    if opts.compile is None:
        return None
    from layerprof.capture.compiled.run import CompiledRun

    return CompiledRun(model, args, kwargs, opts.compile)


def _latency_pass(
    forward: Callable[[], Any],
    sync: Callable[[], None],
    model: torch.nn.Module,
    opts: RunOptions,
    progress: Progress,
    watch: CompileWatch,
) -> tuple[int, list[int]]:
    """The cold call, the warm-up, then ``iters`` clean timed forwards."""
    first_ns = _timed(forward, sync, model)
    progress.advance(1)
    for _ in range(opts.warmup):
        _guarded(forward, model)
        progress.advance(1)
    latency = []
    with watch.window("timed latency forwards"):
        for _ in range(opts.iters):
            latency.append(_timed(forward, sync, model))
            progress.advance(1)
    return first_ns, latency


def _layer_pass(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    forward: Callable[[], Any],
    sync: Callable[[], None],
    device: str,
    opts: RunOptions,
    progress: Progress,
    base: Profile,
    watch: CompileWatch,
) -> Profile:
    """Shapes, FLOPs and memory, then per-layer times from hooks or from ops mode."""
    clean_path = watch_clean_path(model, forward)  # before any hook changes the path
    with ShapeCapture(model) as shapes:
        _guarded(forward, model)
    flops, flop_note = _flops(model, forward, args, kwargs, device, opts)
    peaks = _peaks(model, forward, device)
    memory, memory_note = _activation_memory(model, args, kwargs, device, opts)
    counted = [n for n in (flop_note, memory_note) if n]
    base = base.with_notes(*_opaque_notes(model), *counted)
    base = replace(base, activation_memory=memory)
    if opts.ops is not None:
        progress.close()  # stderr is held while the profiler runs (layerprof.capture.quiet)
        cost = _ops_cost(device, opts)
        with watch.window("ops capture (its untimed first step included)"):
            raw = _capture(model, args, kwargs, device, opts)
        if peaks is None:  # no allocator counters (CPU): --profile-memory's events
            peaks = raw.peak_bytes()
        layers = layer_infos(
            model, shapes.shapes, flops=flops.flops if flops else None,
            output_bytes=shapes.output_bytes, peak_bytes=peaks,
        )  # fmt: skip
        layers, summary = _flop_sections(layers, flops, base, opts)
        base = replace(base, flops=summary)
        note = (
            cost.note()
            if opts.correct_overhead
            else (
                "ops mode: layer times come from torch.profiler ranges and include its"
                " per-op recording cost (not corrected); the latency is from the clean pass"
            )
        )
        traced = _with_trace(base, raw.profile(), raw, ops=True, layers=layers, notes=(note,))
        overhead = ops_overhead(traced, traced.ops, cost, opts.correct_overhead)
        traced = replace(traced, overhead=overhead)
        if opts.correct_overhead:
            from layerprof.capture.ops.cost import corrected_samples

            samples = corrected_samples(traced.samples, traced.ops, layers, cost)
            traced = replace(traced, samples=samples)
        return check_passes(traced, clean_path)
    latency = (base.latency_ns.tolist() if base.latency_ns is not None else None) or []
    samples, overhead = _hooked(model, forward, sync, device, opts, progress, latency, watch)
    if opts.backward:
        samples, notes = _with_backward(samples, model, args, kwargs, opts)
        base = base.with_notes(*notes)
    layers = layer_infos(
        model, shapes.shapes, flops=flops.flops if flops else None,
        output_bytes=shapes.output_bytes, peak_bytes=peaks,
    )  # fmt: skip
    layers, summary = _flop_sections(layers, flops, base, opts)
    profile = replace(base, layers=layers, samples=samples, overhead=overhead, flops=summary)
    return check_passes(profile, clean_path)


def _ops_cost(device: str, opts: RunOptions) -> OpsCorrection:
    """Ops mode's recording cost per operator and layer range (layerprof.capture.ops.cost);
    measured also with --no-correct, as hooks mode's is: the pass-agreement and overhead
    findings weigh the passes' gap against it."""
    from layerprof.capture.ops.cost import calibrate_ops

    return calibrate_ops(device)


def ops_overhead(
    traced: Profile, ops: tuple[OpStat, ...], cost: OpsCorrection, corrected: bool
) -> Overhead:
    """Ops mode's calibrated cost per forward, and the passes' medians: the per-layer
    pass's forward is the root's range, before any correction."""
    from layerprof.capture.ops.cost import forward_ops

    roots = [i.path for i in traced.layers if i.parent is None]
    root = traced.samples.get(roots[0]) if len(roots) == 1 else None
    iterations = max((s.total_ns.n for s in traced.samples.values()), default=0)
    calls = sum(s.calls for s in traced.samples.values())
    return Overhead(
        per_call_ns=cost.range_inside_ns + cost.range_leak_ns,
        inside_ns=cost.range_inside_ns,
        corrected=corrected,
        calls_per_forward=calls,
        clean_ns=traced.latency_ns.median if traced.latency_ns is not None else None,
        instrumented_ns=root.total_ns.median if root is not None and root.calls else None,
        method="ops",
        per_op_ns=cost.per_op_ns,
        ops_per_forward=forward_ops(ops, iterations),
    )


def _opaque_notes(model: torch.nn.Module) -> list[str]:
    """Scripted submodules are timed whole: say why their insides have no rows."""
    from layerprof.capture.modules import visible_modules

    hooked = {p for p, _ in hookable_modules(model)}
    return [
        f"{path} is a TorchScript submodule: timed as one layer (its submodules run"
        " inside TorchScript, where no Python code can time them)"
        for path, _ in visible_modules(model)
        if path not in hooked
    ]


def memory_counter(device: str) -> MemoryCounter | None:
    """The allocator counters of ``device``; CPU has none (tests replace this)."""
    if not device.startswith("cuda"):
        return None
    from layerprof.capture.memory.allocator import CudaMemory

    return CudaMemory(device)


def _peaks(
    model: torch.nn.Module, forward: Callable[[], Any], device: str
) -> dict[str, int] | None:
    counter = memory_counter(device)
    if counter is None:
        return None
    from layerprof.capture.memory.allocator import peak_memory

    return peak_memory(model, forward, counter)


def _activation_memory(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    device: str,
    opts: RunOptions,
) -> tuple[ActivationMemory | None, str | None]:
    """With ``backward``: the bytes each layer saves for backward, from one counted step
    (layerprof.capture.memory.activations); a step the counter cannot run says why."""
    if not opts.backward:
        return None, None
    from layerprof.capture.memory.activations import measure_step

    try:
        section = measure_step(model, args, kwargs, opts.loss, counter=memory_counter(device))
    except Exception as exc:  # the timed backward pass reports a model's own errors
        return None, (
            f"activation memory not counted: {type(exc).__name__}:"
            f" {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        )
    return section, None


def _flops(
    model: torch.nn.Module,
    forward: Callable[[], Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    device: str,
    opts: RunOptions,
) -> tuple[FlopCount | None, str | None]:
    """FLOPs per layer from one counted forward (and a counted step with ``backward``);
    a model the counter cannot run keeps its timings and says why FLOPs are missing."""
    from layerprof.capture.flops.counter import count_model
    from layerprof.capture.step import backward_step

    step = (
        backward_step(model, args, kwargs, opts.loss, synchronizer(device))
        if opts.backward
        else None
    )
    try:
        # keyed by the user's paths already (the counter walks hookable_modules)
        return count_model(model, forward, device=device, step=step), None
    except Exception as exc:  # the counter's own limits, not a model bug: it ran before
        return None, f"FLOPs not counted: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


def _flop_sections(
    layers: tuple[LayerInfo, ...], count: FlopCount | None, base: Profile, opts: RunOptions
) -> tuple[tuple[LayerInfo, ...], FlopSummary | None]:
    """Per-layer FLOP detail and the summary with the device's peak (layerprof.capture.flops.counter)."""
    from layerprof.capture.flops.counter import flop_sections

    meta = base.meta
    return flop_sections(
        layers, count, device=meta.device, dtype=meta.dtype, threads=meta.threads or 1,
        given=opts.peak,
    )  # fmt: skip


def _hooked(
    model: torch.nn.Module,
    forward: Callable[[], Any],
    sync: Callable[[], None],
    device: str,
    opts: RunOptions,
    progress: Progress,
    latency: list[int],
    watch: CompileWatch,
) -> tuple[dict[str, LayerSamples], Overhead]:
    """Hooks mode: calibration (always reported), then the instrumented pass:
    one untimed hooked forward (the hooks' own warm-up), then ``iters`` timed ones."""
    calibration = calibrate(device)
    dclock = CudaEventClock(device) if device.startswith("cuda") else None
    rec = Recorder(
        model,
        clock=HostClock(),
        device_clock=dclock,
        record_shapes=False,
        correction=calibration if opts.correct_overhead else None,
    )
    inst_ns: list[int] = []
    with rec:
        _guarded(forward, model, rec)
        rec.reset()
        with watch.window("timed per-layer (hooked) forwards"):
            for _ in range(opts.iters):
                inst_ns.append(_timed(forward, sync, model, rec))
                progress.advance(1)
    overhead = Overhead(
        per_call_ns=calibration.per_call_ns,
        inside_ns=calibration.inside_ns,
        corrected=opts.correct_overhead,
        calls_per_forward=rec.call_count / max(rec.iterations, 1),
        clean_ns=median(latency) if latency else None,
        instrumented_ns=median(inst_ns) if inst_ns else None,
    )
    return rec.profile(correct=opts.correct_overhead).samples, overhead


def _capture(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    device: str,
    opts: RunOptions,
) -> RawTrace:
    from layerprof.capture.ops.profiler import OpOptions, capture_ops

    return capture_ops(
        model,
        args,
        kwargs,
        iters=opts.iters,
        device=device,
        options=opts.ops or OpOptions(),
        grad_ctx_factory=lambda: _grad_ctx(opts),
        backward=opts.backward,
        loss=opts.loss,
    )


def _with_backward(
    samples: dict[str, LayerSamples],
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    opts: RunOptions,
) -> tuple[dict[str, LayerSamples], tuple[str, ...]]:
    """Hooks mode: add each layer's backward times (layerprof.capture.hooks.backward says how)."""
    from layerprof.capture.hooks.backward import profile_backward

    device = opts.device or device_of(model)
    # On CUDA host marks around an asynchronous backward time launches, not work:
    # time each layer's backward with CUDA events, resolved once per iteration.
    clock = CudaEventClock(device) if device.startswith("cuda") else None
    result = profile_backward(model, args, kwargs, iters=opts.iters, loss=opts.loss, clock=clock)
    out = dict(samples)
    for path, (total, self_t) in result.times.items():
        zeros = [0] * len(total)
        old = out.get(path) or LayerSamples(total_ns=zeros, self_ns=zeros, calls=0.0)
        out[path] = replace(old, backward_total_ns=Series(total), backward_self_ns=Series(self_t))
    return out, result.notes


def _scripted(
    model: Any,
    program: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    opts: RunOptions,
    base: Profile,
    device: str,
) -> Profile:
    """TorchScript / torch.export: per-layer rows from the profiler, not from hooks; its
    recording cost is calibrated and removed as in ops mode (layerprof.capture.ops.cost)."""
    from layerprof.capture.ops.profiler import OpOptions
    from layerprof.capture.scripted.profiler import export_capture, script_capture

    options = opts.ops or OpOptions()
    cost = _ops_cost(device, opts)
    if opts.kind == "torchscript":
        rows = script_capture(model, args, kwargs, iters=opts.iters, options=options)
        layers, raw, notes = rows.layers, rows.raw, rows.notes
        # only the root is a profiler range here; sub-layer spans are read off the ops
        cost = replace(cost, range_inside_ns=0.0, range_leak_ns=0.0)
    else:
        layers, raw = export_capture(program, args, kwargs, iters=opts.iters, options=options)
        notes = (f"{opts.kind}: per-layer times come from torch.profiler ranges",)
    traced = raw.profile()
    note = (
        f"{opts.kind}: the profiler's recording cost was measured"
        f" ({human_time(cost.per_op_ns)} per recorded operator) and removed from layer self"
        " times; operator rows keep it; the latency is from the clean pass"
        if opts.correct_overhead
        else f"{opts.kind}: layer times include the profiler's recording cost (not corrected)"
    )
    out = _with_trace(
        base, traced, raw, ops=opts.ops is not None, layers=layers, notes=(*notes, note)
    )
    out = replace(out, overhead=ops_overhead(out, traced.ops, cost, opts.correct_overhead))
    if opts.correct_overhead:
        from layerprof.capture.ops.cost import corrected_samples

        out = replace(out, samples=corrected_samples(out.samples, traced.ops, layers, cost))
    return out


def _with_trace(
    base: Profile,
    traced: Profile,
    raw: RawTrace,
    *,
    ops: bool,
    layers: tuple[LayerInfo, ...],
    notes: Sequence[str],
) -> Profile:
    """The run's Profile with the per-layer rows, operators and device sections of its trace.

    The trace's own notes (written for ``analyze`` readers) are left out: the
    run's notes say how its rows were measured.
    """
    known = {i.path for i in layers}
    samples = {p: s for p, s in traced.samples.items() if p in known}
    return replace(
        base,
        layers=layers,
        samples=samples,
        ops=traced.ops if ops else (),
        devices=traced.devices,
        kernels=traced.kernels,
        kinds=traced.kinds,
        memcpy=traced.memcpy,
        launches=traced.launches,
        communication=traced.communication,  # collectives (DDP's all-reduces): stragglers
        notes=(*base.notes, *notes),
        events=raw,
    )


def _base_profile(
    model: Any,
    opts: RunOptions,
    device: str,
    latency: list[int],
    first_ns: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Profile:
    """The Profile of the clean pass: meta, latency and the root layer; per-layer passes add to it."""
    from layerprof.profile import Profile

    meta = _meta(model, opts, device, args, kwargs)
    return Profile(
        meta=meta,
        layers=(LayerInfo(path="", type=type(unwrap(model)).__name__, parent=None),),
        latency_ns=Series(latency),
        first_ns=first_ns,
    )


def _meta(
    model: Any, opts: RunOptions, device: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Meta:
    import torch

    from layerprof.profile import now_iso

    return Meta(
        model=opts.model_name or type(unwrap(model)).__name__,
        device=device,
        dtype=opts.dtype or _dtype_of(model),
        torch=torch.__version__,
        inputs=opts.input_descriptions or _describe(args, kwargs),
        warmup=opts.warmup,
        iters=opts.iters,
        threads=torch.get_num_threads(),
        mode="eval" if opts.eval else ("train" if getattr(model, "training", False) else "eval"),
        grad=opts.grad,
        source="layerprof.run",
        created=now_iso(),
        host=socket.gethostname(),
        extra={
            **_rank_meta(),
            **host_load(),
            **(opts.ops.meta() if opts.ops is not None else {}),
            **opts.meta_extra,
        },
    )


def _rank_meta() -> dict[str, Any]:
    from layerprof.capture.distributed import rank_info

    info = rank_info()
    return {} if info is None else {"rank": info.rank, "world_size": info.world_size}


def _timed(
    forward: Callable[[], Any],
    sync: Callable[[], None],
    model: torch.nn.Module,
    rec: Recorder | None = None,
) -> int:
    sync()
    t0 = time.perf_counter_ns()
    _guarded(forward, model, rec)
    sync()
    return time.perf_counter_ns() - t0


def _guarded(
    forward: Callable[[], Any], model: torch.nn.Module, rec: Recorder | None = None
) -> Any:
    """Call the model; on error, name the innermost layer it failed in."""
    try:
        return forward()
    except (KeyboardInterrupt, ModelRunError):
        raise
    except Exception as exc:
        path = rec.active_path() if rec is not None else locate_failure(model, forward)
        raise model_error(model, path, exc) from exc


@contextlib.contextmanager
def _run_state(model: torch.nn.Module, opts: RunOptions, device: str) -> Iterator[None]:
    """Eval mode, grad mode, thread count and current CUDA device for the run; all restored."""
    import torch

    was_training = getattr(model, "training", False)  # torch.jit.freeze drops it
    threads = torch.get_num_threads()
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    if opts.eval:
        model.eval()
    # cuda:N runs on that device's current stream, where the event clock records too.
    on_device: contextlib.AbstractContextManager[Any] = (
        torch.cuda.device(device) if device.startswith("cuda") else contextlib.nullcontext()
    )
    try:
        with on_device, _grad_ctx(opts):
            yield
    finally:
        model.train(was_training)
        torch.set_num_threads(threads)


def _infer_device(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The model's device, or for a model without parameters or buffers, the first
    input tensor's: a CUDA run must synchronize even when the model holds no weights."""
    device = device_of(model)
    if device != "cpu":
        return device
    for value in (*args, *kwargs.values()):
        found = getattr(value, "device", None)
        if found is not None and hasattr(value, "dtype"):
            return str(found)
    return device


def _grad_ctx(opts: RunOptions) -> contextlib.AbstractContextManager[Any]:
    import torch

    if opts.grad:
        return torch.enable_grad()
    if opts.inference_mode:
        return torch.inference_mode()
    return torch.no_grad()


def _forward(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
    return lambda: model(*args, **kwargs)


def _dtype_of(model: torch.nn.Module) -> str:
    for p in model.parameters():
        return str(p.dtype).removeprefix("torch.")
    return "float32"


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, ...]:
    from layerprof.capture.shapes import describe_inputs

    return describe_inputs(args, kwargs)
