"""Ops mode (``--ops``): ``iters`` forwards under torch.profiler, operators attributed to layers.

Layer times are the ``layer:{path}`` ranges the Recorder's wrappers open;
their recording cost is calibrated (``capture.profiling.cost``) also with
``--no-correct``, since the pass-agreement and overhead findings weigh the
passes' gap against it. The torch.profiler toolkit it runs on
(``capture.profiling``) serves the scripted and compiled modes too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from layerprof.capture.calls import grad_ctx
from layerprof.capture.layerpass import AsGiven
from layerprof.capture.options import OpOptions
from layerprof.capture.prelude import prelude
from layerprof.capture.profiling.cost import ops_cost, ops_overhead
from layerprof.capture.profiling.traced import with_trace
from layerprof.pivot.notes import Note

if TYPE_CHECKING:
    from layerprof.capture.layerpass import Pass
    from layerprof.capture.options import RunOptions
    from layerprof.capture.profiling.profiler import RawTrace
    from layerprof.pivot.profile import Profile


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
            from layerprof.capture.profiling.cost import corrected_samples

            samples = corrected_samples(traced.samples, traced.ops, layers, cost)
            traced = replace(traced, samples=samples)
        return facts.checked(traced)


def _capture(run: Pass) -> RawTrace:
    from layerprof.capture.profiling.profiler import capture_ops

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
