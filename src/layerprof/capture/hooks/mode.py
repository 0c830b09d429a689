"""Hooks mode, the default: calibrated wrappers time every layer's forward (and backward).

Calibration (always reported) measures the wrappers' own per-call cost on a
model of empty layers; then one untimed hooked forward (the wrappers' own
warm-up) and ``iters`` timed ones; with ``backward`` each layer's backward
from autograd graph-node hooks (``capture.hooks.backward``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from layerprof.capture.calls import guarded, timed
from layerprof.capture.layerpass import AsGiven
from layerprof.capture.platform.clocks import CudaEventClock, HostClock
from layerprof.capture.platform.device import device_of
from layerprof.capture.prelude import prelude
from layerprof.capture.recording.calibration import measured_calibration, unmeasured_note
from layerprof.capture.recording.recorder import Recorder
from layerprof.pivot.notes import Note
from layerprof.pivot.records import LayerSamples, Overhead
from layerprof.stats import Series

if TYPE_CHECKING:
    import torch

    from layerprof.capture.layerpass import Pass
    from layerprof.capture.options import RunOptions
    from layerprof.pivot.profile import Profile


class HooksMode(AsGiven):
    """The eager model with the Recorder's wrappers on every module."""

    @staticmethod
    def wants(opts: RunOptions) -> bool:
        return True

    def layer_pass(self, run: Pass) -> Profile:
        facts = prelude(run)
        base = facts.onto(run.base)
        latency = base.latency_ns
        clean_ns = latency.median if latency is not None and len(latency) else None
        samples, overhead, unmeasured = _hooked(run, clean_ns)
        if unmeasured:
            base = base.with_notes(unmeasured_note())
        if run.opts.backward:
            samples, notes = _with_backward(samples, run)
            base = base.with_notes(*notes)
        layers, summary = facts.layers(run, base)
        profile = replace(base, layers=layers, samples=samples, overhead=overhead, flops=summary)
        return facts.checked(profile)


def _hooked(run: Pass, clean_ns: float | None) -> tuple[dict[str, LayerSamples], Overhead, bool]:
    """Calibration, then one untimed hooked forward and ``iters`` timed ones; the bool:
    the calibration read 0 twice (a busy machine), so nothing was corrected."""
    model, forward, device, opts = run.model, run.forward, run.device, run.opts
    calibration = measured_calibration(device)
    unmeasured = opts.correct_overhead and not calibration.measured
    correct = opts.correct_overhead and not unmeasured
    dclock = CudaEventClock(device) if device.startswith("cuda") else None
    rec = Recorder(
        model,
        clock=HostClock(),
        device_clock=dclock,
        record_shapes=False,
        correction=calibration if correct else None,
    )
    # one int64 per forward (a list of ints would cost 40 bytes each: run's memory bound)
    inst_ns = np.zeros(opts.iters, dtype=np.int64)
    with rec:
        guarded(forward, model, rec)
        rec.reset()
        # summed per layer as recorded: 16 bytes per layer and iteration at the peak
        rec.stream(opts.iters, correct=correct)
        with run.watch.window("timed per-layer (hooked) forwards"):
            for i in range(opts.iters):
                inst_ns[i] = timed(forward, run.sync, model, rec)
                run.progress.advance(1)
    overhead = Overhead(
        per_call_ns=calibration.per_call_ns,
        inside_ns=calibration.inside_ns,
        corrected=correct,
        calls_per_forward=rec.call_count / max(rec.iterations, 1),
        clean_ns=clean_ns,
        instrumented_ns=Series(inst_ns).median if opts.iters else None,
    )
    return rec.profile(correct=correct).samples, overhead, unmeasured


def _with_backward(
    samples: dict[str, LayerSamples], run: Pass
) -> tuple[dict[str, LayerSamples], tuple[Note, ...]]:
    """Add each layer's backward times (layerprof.capture.hooks.backward says how)."""
    from layerprof.capture.hooks.backward import profile_backward

    model: torch.nn.Module = run.model
    opts = run.opts
    device = opts.device or device_of(model)
    # On CUDA host marks around an asynchronous backward time launches, not work:
    # time each layer's backward with CUDA events, resolved once per iteration.
    clock = CudaEventClock(device) if device.startswith("cuda") else None
    result = profile_backward(
        model, run.args, run.kwargs, iters=opts.iters, loss=opts.loss, clock=clock
    )
    out = dict(samples)
    for path, (total, self_t) in result.times.items():
        zeros = [0] * len(total)
        old = out.get(path) or LayerSamples(total_ns=zeros, self_ns=zeros, calls=0.0)
        out[path] = replace(old, backward_total_ns=Series(total), backward_self_ns=Series(self_t))
    return out, result.notes
