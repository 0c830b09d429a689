"""TorchScript and torch.export: per-layer rows from the profiler, not from hooks.

Forward hooks never fire inside TorchScript or an exported graph, so the rows
come from the profiler's module hierarchy (TorchScript) or the graph's
``nn_module_stack`` (export); the recording cost is calibrated and removed as
in ops mode. FLOPs are not counted: the ops run outside the Python modules the
counter follows.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from layerprof.capture.layerpass import AsGiven
from layerprof.capture.options import OpOptions
from layerprof.capture.profiling.cost import ops_cost, ops_overhead
from layerprof.capture.profiling.traced import with_trace
from layerprof.pivot.notes import Note
from layerprof.units import human_time

if TYPE_CHECKING:
    from layerprof.capture.layerpass import Pass
    from layerprof.capture.options import RunOptions
    from layerprof.pivot.profile import Profile

_KIND_NAMES = {"torchscript": "TorchScript model", "export": "torch.export program"}


class ScriptedMode(AsGiven):
    """A TorchScript module or a torch.export program."""

    @staticmethod
    def wants(opts: RunOptions) -> bool:
        return opts.kind != "eager"

    def layer_pass(self, run: Pass) -> Profile:
        kind = run.opts.kind
        what = _KIND_NAMES.get(kind, kind)
        return _scripted(run).with_notes(
            Note(
                "flops-not-counted",
                f"FLOPs not counted: a {what} runs its ops outside the Python modules"
                " the counter follows; run the eager model (--arch) for FLOPs and the"
                " roofline",
                {"kind": kind},
            )
        )


def _scripted(run: Pass) -> Profile:
    """Rows off the profiled trace, its recording cost removed (layerprof.capture.profiling.cost)."""
    from layerprof.capture.scripted.profiler import export_capture, script_capture

    opts, base = run.opts, run.base
    options = opts.ops or OpOptions()
    cost = ops_cost(run.device, opts)
    if opts.kind == "torchscript":
        rows = script_capture(run.model, run.args, run.kwargs, iters=opts.iters, options=options)
        layers, raw, notes = rows.layers, rows.raw, rows.notes
        # only the root is a profiler range here; sub-layer spans are read off the ops
        cost = replace(cost, range_inside_ns=0.0, range_leak_ns=0.0)
    else:
        layers, raw = export_capture(
            run.program, run.args, run.kwargs, iters=opts.iters, options=options
        )
        notes = (
            Note(
                "profiler-layer-times",
                f"{opts.kind}: per-layer times come from torch.profiler ranges",
                {"kind": opts.kind},
            ),
        )
    traced = raw.profile()
    note = Note(
        "ops-cost",
        f"{opts.kind}: the profiler's recording cost was measured"
        f" ({human_time(cost.per_op_ns)} per recorded operator) and removed from layer self"
        " times; operator rows keep it; the latency is from the clean pass"
        if opts.correct_overhead
        else f"{opts.kind}: layer times include the profiler's recording cost (not corrected)",
        {"kind": opts.kind, "corrected": opts.correct_overhead}
        | ({"per_op_ns": cost.per_op_ns} if opts.correct_overhead else {}),
    )
    out = with_trace(
        base, traced, raw, ops=opts.ops is not None, layers=layers, notes=(*notes, note)
    )
    out = replace(out, overhead=ops_overhead(out, traced.ops, cost, opts.correct_overhead))
    if opts.correct_overhead:
        from layerprof.capture.profiling.cost import corrected_samples

        out = replace(out, samples=corrected_samples(out.samples, traced.ops, layers, cost))
    return out
