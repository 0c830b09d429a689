"""Ops mode (``--ops``): ``iters`` forwards under torch.profiler, operators attributed to layers.

Layer times are the ``layer:{path}`` ranges the Recorder's wrappers open;
their recording cost is calibrated (``capture.ops.cost``) also with
``--no-correct``, since the pass-agreement and overhead findings weigh the
passes' gap against it. ``with_trace`` and ``ops_overhead`` serve the
scripted modes too, which read their rows off the same kind of trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from layerprof.capture.calls import grad_ctx
from layerprof.capture.layerpass import AsGiven
from layerprof.capture.prelude import prelude
from layerprof.notes import Note
from layerprof.records import LayerInfo, OpStat, Overhead

if TYPE_CHECKING:
    from layerprof.capture.layerpass import Pass
    from layerprof.capture.ops.cost import OpsCorrection
    from layerprof.capture.ops.profiler import RawTrace
    from layerprof.capture.options import RunOptions
    from layerprof.profile import Profile


class OpsMode(AsGiven):
    """The eager model under torch.profiler, its ops attributed to module paths."""

    @staticmethod
    def wants(opts: RunOptions) -> bool:
        return opts.ops is not None

    def layer_pass(self, run: Pass) -> Profile:
        facts = prelude(run)
        opts = run.opts
        base = facts.onto(run.base)
        run.progress.close()  # stderr is held while the profiler runs (layerprof.capture.quiet)
        cost = ops_cost(run.device, opts)
        with run.watch.window("ops capture (its untimed first step included)"):
            raw = _capture(run)
        peaks = facts.peaks
        if peaks is None:  # no allocator counters (CPU): --profile-memory's events
            peaks = raw.peak_bytes()
        layers, summary = facts.layers(run, base, peaks)
        base = replace(base, flops=summary)
        note = (
            cost.note()
            if opts.correct_overhead
            else Note(
                "ops-cost",
                "ops mode: layer times come from torch.profiler ranges and include its"
                " per-op recording cost (not corrected); the latency is from the clean pass",
                {"corrected": False},
            )
        )
        traced = with_trace(base, raw.profile(), raw, ops=True, layers=layers, notes=(note,))
        overhead = ops_overhead(traced, traced.ops, cost, opts.correct_overhead)
        traced = replace(traced, overhead=overhead)
        if opts.correct_overhead:
            from layerprof.capture.ops.cost import corrected_samples

            samples = corrected_samples(traced.samples, traced.ops, layers, cost)
            traced = replace(traced, samples=samples)
        return facts.checked(traced)


def ops_cost(device: str, opts: RunOptions) -> OpsCorrection:
    """Ops mode's recording cost per operator and layer range (layerprof.capture.ops.cost)."""
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


def _capture(run: Pass) -> RawTrace:
    from layerprof.capture.ops.profiler import capture_ops
    from layerprof.capture.options import OpOptions

    opts = run.opts
    return capture_ops(
        run.model,
        run.args,
        run.kwargs,
        iters=opts.iters,
        device=run.device,
        options=opts.ops or OpOptions(),
        grad_ctx_factory=lambda: grad_ctx(opts),
        backward=opts.backward,
        loss=opts.loss,
    )


def with_trace(
    base: Profile,
    traced: Profile,
    raw: RawTrace,
    *,
    ops: bool,
    layers: tuple[LayerInfo, ...],
    notes: Sequence[Note],
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
