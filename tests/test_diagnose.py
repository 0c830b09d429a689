"""Findings name the bottleneck with the numbers behind it."""

from __future__ import annotations

from dataclasses import replace

import torch

from layerprof import Recorder
from layerprof.clocks import FakeClock
from layerprof.diagnose import diagnose, diagnose_trace
from layerprof.records import Meta, Overhead
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
        overhead=Overhead(per_call_ns=2000, inside_ns=500, corrected=True, calls_per_forward=5,
                          clean_ns=1000, instrumented_ns=3000),
    )  # fmt: skip
    titles = " | ".join(f.title for f in diagnose(prof))
    assert (
        "noisy" in titles and "first call is 50x" in titles and "slowed the forward 3.0x" in titles
    )


def test_trace_findings_from_dict() -> None:
    data = {
        "ranks": [
            {
                "rank": 0,
                "devices": [{"device": 0, "busy_ms": 30.0, "window_ms": 100.0, "utilization": 0.3,
                             "memcpy_ms": 6.0, "memset_ms": 0.0,
                             "idle_breakdown_ms": {"host_wait": 60.0, "short_gap": 1.0}}],
                "kernel_kinds": [{"kind": "communication", "total_ms": 20.0},
                                 {"kind": "compute", "total_ms": 10.0}],
            }
        ],
        "cross_rank": {"slowest_rank": 1, "ranks": [{"median_step_ms": 100.0}, {"median_step_ms": 130.0}]},
    }  # fmt: skip
    titles = [f.title for f in diagnose_trace(data)]
    assert titles[0] == "rank 0: GPU 0 is idle 70% of the steps"
    assert any("memcpy" in t for t in titles)
    assert any("communication" in t for t in titles)
    assert any("straggler" in t for t in titles)
