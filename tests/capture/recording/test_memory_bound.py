"""The memory a run keeps per layer and iteration (issue 10.4: it was ~480 bytes).

Bytes, not time: tracemalloc counts Python objects and numpy buffers alike, so
the slope between two iteration counts is deterministic enough to bound. The
README states the bound; benchmarks/memory_bound.py prints it at a larger size.
"""

from __future__ import annotations

import gc
import json
import tracemalloc

import numpy as np
import pytest
import torch
from torch import nn

import layerprof
from layerprof.capture.recording import recorder as recorder_module
from layerprof.pivot.profile import Profile

LAYERS = 40


class Empty(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def model() -> nn.Module:
    return nn.Sequential(*(Empty() for _ in range(LAYERS)))


def kept_and_peak(iters: int) -> tuple[int, int, Profile]:
    """Bytes the finished Profile keeps, and the peak during the run, above the start."""
    m, x = model(), torch.zeros(1)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        prof = layerprof.profile(m, x, warmup=0, iters=iters)
        for root in prof.tree():  # summaries are computed (and cached) on first use
            root.self_check(tolerance_ns=float("inf"))
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return kept - base, peak - base, prof


def test_samples_cost_at_most_16_bytes_each(monkeypatch: pytest.MonkeyPatch) -> None:
    # The event log is compacted every COMPACT_AT entries (a fixed few MB at most);
    # a small threshold puts these short runs in the steady state long runs are in.
    monkeypatch.setattr(recorder_module, "COMPACT_AT", 1 << 12)
    # lazy imports and one-time caches, outside the slope: past 128 iterations the
    # summaries take numpy's path, whose first use imports numpy.ma (~540 kB, which
    # doubled the slope when no earlier test had imported it)
    kept_and_peak(150)
    k1, p1, _ = kept_and_peak(100)
    k2, p2, prof = kept_and_peak(600)
    cells = (LAYERS + 1) * 500
    # two quantities (total, self) per layer and iteration, <= 16 bytes per sample each
    assert (k2 - k1) / cells <= 2 * 16, f"kept {(k2 - k1) / cells:.1f} bytes/layer/iteration"
    # recording (24 bytes a call, compacted) and reducing stay within a few samples too
    assert (p2 - p1) / cells <= 96, f"peak {(p2 - p1) / cells:.1f} bytes/layer/iteration"
    s = prof.samples["0"]
    assert s.total_ns.values.dtype == np.int64 and len(s.total_ns.values) == 600
    assert s.self_ns.values.dtype == np.int64


def test_json_keeps_summaries_unless_samples_are_asked_for() -> None:
    prof = layerprof.profile(model(), torch.zeros(1), warmup=0, iters=50)
    summary = json.loads(prof.render("json"))
    layer = next(d for d in summary["layers"] if d["path"] == "0")
    assert "samples" not in layer  # (the latency keeps its samples: one series)
    full = prof.to_dict(samples=True)
    layer = next(d for d in full["layers"] if d["path"] == "0")
    assert len(layer["samples"]["total_ms"]) == 50
    # the raw samples are what adds: 50 numbers of >= 4 characters per layer and series
    assert len(json.dumps(full)) - len(json.dumps(summary)) > (LAYERS + 1) * 2 * 50 * 4
