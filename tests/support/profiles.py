"""Profiles built without measuring: exact numbers for renderer, codec and analysis tests."""

from __future__ import annotations

from dataclasses import replace

import torch

from layerprof import Recorder
from layerprof.capture.platform.clocks import FakeClock
from layerprof.pivot.notes import SAVED, Note
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerInfo, LayerSamples, Meta, Overhead
from layerprof.pivot.sections.flops import FlopSummary, LayerFlops, Peak, UncountedOp
from layerprof.pivot.sections.sweep import Sweep, SweepPoint
from layerprof.stats import Summary
from tests.support import zoo_models as zoo


def fake_profile() -> Profile:
    """The Recorder on a model that advances a fake clock: exact, known times."""
    clock = FakeClock(scale=10_000)
    model = zoo.Containers(clock)
    with Recorder(model, clock=clock) as rec:
        for _ in range(3):
            model(torch.zeros(2, 3))
    meta = Meta(
        model="Containers", torch="2.x", inputs=("2x3",), warmup=1, iters=3, created="fixed"
    )
    prof = rec.profile(meta=meta)
    return replace(
        prof,
        latency_ns=(80_000, 82_000, 90_000),
        first_ns=500_000,
        overhead=Overhead(per_call_ns=1500, inside_ns=400, corrected=True, calls_per_forward=6),
    )


MS = 1_000_000


PEAK = Peak(100e9, 10e9, "given", "--peak")  # ridge 10 FLOP/B


def _layer(path: str, type_: str, flops: int, detail: LayerFlops) -> LayerInfo:
    parent = None if path == "" else ""
    return LayerInfo(path, type_, parent, flops=flops, flop_detail=detail)


def flop_profile(peak: Peak | None = PEAK) -> Profile:
    """fc: 100 MFLOP in 10 ms moving 1 MB (intensity 100, compute-bound, 10% of peak);
    act: 1 MFLOP elementwise in 1 ms moving 8 MB (intensity 0.125, memory-bound, 80% of
    what that intensity allows); spectrum: half its op time uncounted; emb: a lookup."""
    layers = (
        _layer("", "Net", 101_000_000, LayerFlops(elementwise=1_000_000, bytes=10_000_000,
                                                  counted_ns=12 * MS, uncounted_ns=2 * MS)),
        _layer("emb", "Embedding", 0, LayerFlops(bytes=1_000_000, counted_ns=MS,
                                                 label="lookup")),
        _layer("fc", "Linear", 100_000_000, LayerFlops(bytes=1_000_000, counted_ns=10 * MS)),
        _layer("act", "ReLU", 1_000_000, LayerFlops(elementwise=1_000_000, bytes=8_000_000,
                                                    counted_ns=MS, label="elementwise")),
        _layer("spectrum", "Spectrum", 0, LayerFlops(bytes=1_000_000, counted_ns=0,
                                                     uncounted_ns=2 * MS,
                                                     uncounted="aten._fft_r2c: no formula")),
    )  # fmt: skip
    times = {"emb": 1 * MS, "fc": 10 * MS, "act": 1 * MS, "spectrum": 2 * MS}
    samples = {p: LayerSamples([t] * 3, [t] * 3, 1.0) for p, t in times.items()}
    samples[""] = LayerSamples([14 * MS] * 3, [0] * 3, 1.0)
    summary = FlopSummary(
        forward=101_000_000, elementwise=1_000_000, counted_ns=12 * MS, uncounted_ns=2 * MS,
        uncounted_ops=(UncountedOp("aten._fft_r2c", 2 * MS, 1, "no formula"),), peak=peak,
    )  # fmt: skip
    meta = Meta(model="Net", torch="2.x", inputs=("8x64",), iters=3, created="fixed")
    return Profile(
        meta=meta, layers=layers, samples=samples, latency_ns=[14 * MS] * 3, flops=summary
    )


def synthetic() -> Sweep:
    def lat(ms: float) -> Summary:
        ns = ms * 1e6
        return Summary(median=ns, mean=ns, p90=ns * 1.1, p99=ns * 1.2, min=ns, max=ns * 1.3,
                       std=ns * 0.05, n=20)  # fmt: skip

    points = (
        SweepPoint(1, "float32", 2, latency=lat(1.0), samples_per_s=1000.0, peak_bytes=1 << 20,
                   flops=10**9, shares=(("fc1", 0.6), ("fc2", 0.3))),
        SweepPoint(8, "float32", 2, latency=lat(4.0), samples_per_s=2000.0, peak_bytes=8 << 20,
                   flops=8 * 10**9, shares=(("fc1", 0.7), ("fc2", 0.25))),
        SweepPoint(64, "float32", 2, status="out of memory", reason="CUDA out of memory"),
        SweepPoint(128, "float32", 2, status="skipped", reason="batch 64, float32, 2 threads ran out of memory"),
    )  # fmt: skip
    return Sweep(
        model="Mlp", device="cuda:0", inputs=("8x16",), batch_dim=0, points=points,
        torch="2.x", host="h", created="fixed", warmup=3, iters=20,
        notes=(Note(SAVED, "batch 64, float32, 2 threads: out of memory (CUDA out of memory); batches 128 not tried"),),
    )  # fmt: skip
