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
   training step); on CUDA one reading the allocator's peaks;
5. hooks mode: calibration — the hooks' own per-call cost, measured on a model
   of empty layers with the same hooks — then one untimed hooked forward and
   ``iters`` hooked forwards (plus the backward pass with ``backward``);
   ops mode instead: ``iters`` forwards under torch.profiler (layerprof.capture.profiling.profiler);
   TorchScript / torch.export: the profiler's module hierarchy (layerprof.capture.scripted.profiler);
   ``compile``: the model runs compiled from the cold call on (which pays the
   compile), and its kernels are attributed to layers (layerprof.capture.compiled.run).

Hooks, threads and train/eval mode are restored in ``finally``, also when
the model raises or the user presses Ctrl-C.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from layerprof.capture.calls import grad_ctx, guarded, timed
from layerprof.capture.compilewatch import CompileWatch
from layerprof.capture.layerpass import Pass
from layerprof.capture.modes import choose
from layerprof.capture.options import RunOptions
from layerprof.capture.platform.clocks import synchronizer
from layerprof.capture.platform.device import device_of
from layerprof.capture.platform.distributed import rank_info, unwrap, wrapper_note
from layerprof.capture.platform.hostload import host_load
from layerprof.capture.progress import Progress
from layerprof.capture.shapes import describe_inputs
from layerprof.load.modulegraph import check_acyclic
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile, now_iso
from layerprof.pivot.records import LayerInfo, Meta
from layerprof.stats import Series

if TYPE_CHECKING:
    import torch

    from layerprof.pivot.profile import Profile


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
    """Cold call, warm-up, clean latency pass, then the per-layer pass of the mode the
    options choose (layerprof.capture.modes).

    ``program`` is the ``torch.export.ExportedProgram`` behind ``model`` when
    ``options.kind == "export"``. In ops mode (and for TorchScript / export)
    the Profile's ``events`` hold the recorded trace, for the trace exports.
    """
    opts = options or RunOptions()
    kwargs = kwargs or {}
    check_acyclic(model)  # eval()/train() recurse forever on a looping module tree
    device = opts.device or _infer_device(model, args, kwargs)
    sync = synchronizer(device)
    watch = CompileWatch()  # torch.compile recompiles inside the timed forwards
    mode = choose(model, args, kwargs, opts)
    with _run_state(model, opts, device), mode.session():
        progress = Progress(enabled=opts.progress, total=1 + opts.warmup + 2 * opts.iters)
        model, forward = mode.subject(model, _forward(model, args, kwargs))
        try:
            first_ns, latency = _latency_pass(forward, sync, model, opts, progress, watch)
            base = _base_profile(model, opts, device, latency, first_ns, args, kwargs)
            profile = (
                mode.layer_pass(
                    Pass(model, args, kwargs, forward, sync, device, opts, progress, base, watch,
                         program)
                )
                if opts.layers
                else base
            )  # fmt: skip
        finally:
            progress.close()
    return profile.with_notes(*watch.notes(), *_wrapper_notes(model))


def _wrapper_notes(model: Any) -> list[Note]:

    note = wrapper_note(model)
    return [note] if note else []


def _latency_pass(
    forward: Callable[[], Any],
    sync: Callable[[], None],
    model: torch.nn.Module,
    opts: RunOptions,
    progress: Progress,
    watch: CompileWatch,
) -> tuple[int, npt.NDArray[np.int64]]:
    """The cold call, the warm-up, then ``iters`` clean timed forwards (int64: a list of
    ints would hold 40 bytes per forward through the layer pass)."""
    first_ns = timed(forward, sync, model)
    progress.advance(1)
    for _ in range(opts.warmup):
        guarded(forward, model)
        progress.advance(1)
    latency = np.zeros(opts.iters, dtype=np.int64)
    with watch.window("timed latency forwards"):
        for i in range(opts.iters):
            latency[i] = timed(forward, sync, model)
            progress.advance(1)
    return first_ns, latency


def _base_profile(
    model: Any,
    opts: RunOptions,
    device: str,
    latency: npt.NDArray[np.int64],
    first_ns: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Profile:
    """The Profile of the clean pass: meta, latency and the root layer; per-layer passes add to it."""

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

    return Meta(
        model=opts.model_name or type(unwrap(model)).__name__,
        device=device,
        dtype=opts.dtype or dtype_of(model),
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

    info = rank_info()
    return {} if info is None else {"rank": info.rank, "world_size": info.world_size}


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
        with on_device, grad_ctx(opts):
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


def _forward(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
    return lambda: model(*args, **kwargs)


def dtype_of(model: torch.nn.Module) -> str:
    for p in model.parameters():
        return str(p.dtype).removeprefix("torch.")
    return "float32"


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, ...]:

    return describe_inputs(args, kwargs)
