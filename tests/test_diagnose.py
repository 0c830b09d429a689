"""Findings name the bottleneck with the numbers behind it."""

from __future__ import annotations

from dataclasses import replace

import torch

from layerprof import Recorder
from layerprof.analysis.diagnose import diagnose, diagnose_run
from layerprof.capture.clocks import FakeClock
from layerprof.profile import Profile, Run
from layerprof.records import Meta, Overhead
from layerprof.sections import CrossRank, DeviceUse, KindRow, RankLine
from tests import zoo_models as zoo


def fake(model_factory, **profile_fields):
    clock = FakeClock(scale=1000)
    model = model_factory(clock)
    with Recorder(model, clock=clock) as rec:
        for _ in range(3):
            model(torch.zeros(1))
    return replace(rec.profile(meta=Meta(model="m")), **profile_fields)


def test_bottleneck_layer_is_named() -> None:
    findings = diagnose(fake(zoo.Nested))
    top = findings[0]
    assert top.severity == "high" and top.layer == "a.a2"
    assert "55%" in top.detail  # 200 of 365


def test_quiet_profile_has_no_latency_findings() -> None:
    prof = fake(zoo.Nested, latency_ns=(1000, 1010, 1005, 1001, 1003), first_ns=1500)
    assert not [f for f in diagnose(prof) if "latency" in f.title or "first call" in f.title]


def test_noisy_cold_and_overhead_findings() -> None:
    prof = fake(
        zoo.Nested,
        latency_ns=(1000, 1000, 1000, 2000, 2500),
        first_ns=50_000,
    )
    titles = " | ".join(f.title for f in diagnose(prof))
    assert "noisy" in titles and "first call is 50x" in titles
    steady = (1000, 1010, 990, 1005, 995, 1000, 1002, 998, 1001, 999)
    overhead = Overhead(per_call_ns=2000, inside_ns=500, corrected=True, calls_per_forward=5,
                        clean_ns=1000, instrumented_ns=3000)  # fmt: skip
    titles = " | ".join(
        f.title for f in diagnose(fake(zoo.Nested, latency_ns=steady, overhead=overhead))
    )
    assert "slowed the forward 3.0x" in titles


def test_overhead_finding_rests_on_the_clean_interval() -> None:
    """5 samples give the median's CI as [min, max]: 3000 is not 1.5x beyond 2500."""
    noisy = (1000, 1000, 1000, 2000, 2500)
    overhead = Overhead(per_call_ns=2000, inside_ns=500, corrected=True, calls_per_forward=5,
                        clean_ns=1000, instrumented_ns=3000)  # fmt: skip
    prof = fake(zoo.Nested, latency_ns=noisy, overhead=overhead)
    assert not [f for f in diagnose(prof) if "slowed" in f.title]


def test_trace_findings_from_typed_sections() -> None:
    ms = 1_000_000
    gpu = DeviceUse(
        device=0, busy_ns=30 * ms, busy_in_window_ns=30 * ms, window_ns=100 * ms,
        idle_ns=70 * ms, utilization=0.3, kernel_ns=24 * ms, memcpy_ns=6 * ms, memset_ns=0,
        streams=1, host_wait_ns=60 * ms, short_gap_ns=1 * ms, other_idle_ns=9 * ms,
    )  # fmt: skip
    kinds = (KindRow("communication", 4, 20 * ms), KindRow("compute", 8, 10 * ms))
    rank0 = Profile(meta=Meta(model="m", source="trace"), devices=(gpu,), kinds=kinds)
    rank1 = replace(rank0, meta=Meta(model="m", source="trace", extra={"rank": 1}), devices=())
    rank0 = replace(rank0, meta=Meta(model="m", source="trace", extra={"rank": 0}))
    cross = CrossRank(
        steps=(),
        ranks=(RankLine(0, 100 * ms, 0, 0), RankLine(1, 130 * ms, 0, 0)),
        slowest_rank=1,
    )
    titles = [f.title for f in diagnose_run(Run(path="d", ranks=(rank0, rank1), cross=cross))]
    assert titles[0] == "rank 0: GPU 0 is idle 70% of the steps"
    assert any("memcpy" in t for t in titles)
    assert any("communication" in t for t in titles)
    assert any("straggler" in t for t in titles)
    idle = next(f for f in diagnose(rank0) if "idle" in f.title)
    assert "host cannot feed the GPU" in idle.hint  # the largest idle bucket decides
