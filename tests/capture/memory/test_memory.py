"""Peak memory per layer with a fake allocator: exact numbers."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from layerprof.capture.memory.allocator import peak_memory
from layerprof.traceformat import LAYER_RANGE
from tests.support.fake_allocator import FakeAllocator


class Uses(nn.Module):
    """Allocates ``temp`` bytes, frees them, keeps ``keep`` bytes (its output)."""

    def __init__(self, mem: FakeAllocator, temp: int, keep: int) -> None:
        super().__init__()
        self.mem, self.temp, self.keep = mem, temp, keep

    def forward(self, x: Any) -> Any:
        self.mem.alloc(self.temp)
        self.mem.free(self.temp)
        self.mem.alloc(self.keep)
        return x


class Parent(nn.Module):
    def __init__(self, mem: FakeAllocator) -> None:
        super().__init__()
        self.mem = mem
        self.a = Uses(mem, temp=100, keep=10)
        self.b = Uses(mem, temp=30, keep=5)

    def forward(self, x: Any) -> Any:
        x = self.b(self.a(x))
        self.mem.alloc(50)  # the parent's own work after its children
        self.mem.free(50)
        return x


def test_peaks_nest_and_parents_see_their_children() -> None:
    mem = FakeAllocator()
    mem.alloc(1000)  # weights already there
    model = Parent(mem)
    peaks = peak_memory(model, lambda: model(torch.zeros(1)), mem)
    assert peaks["a"] == 100  # temp 100 at its peak
    assert peaks["b"] == 30 + 0  # entry level already includes a's 10
    # parent: a's peak 1100 is the highest point above its entry 1000
    assert peaks[""] == 100
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_parent_own_peak_after_children() -> None:
    mem = FakeAllocator()
    model = Parent(mem)
    model.a.temp = 1  # now the parent's own 50 (on top of 15 kept) is the top
    peaks = peak_memory(model, lambda: model(torch.zeros(1)), mem)
    assert peaks[""] == 15 + 50


def test_runner_reports_peak_bytes_with_a_counter(monkeypatch) -> None:
    """The CUDA path of the runner, driven on CPU by a fake allocator."""
    import layerprof
    from layerprof.capture import prelude

    mem = FakeAllocator()
    model = Parent(mem)
    monkeypatch.setattr(prelude, "memory_counter", lambda device: mem)
    prof = layerprof.profile(model, torch.zeros(1), warmup=0, iters=2)
    assert prof.row("a").peak_bytes == 100
    assert prof.to_dict()["layers"][1]["peak_bytes"] == 100
    assert layerprof.Profile.from_dict(prof.to_dict(), source="m").row("a").peak_bytes == 100


def test_no_counter_on_cpu() -> None:
    import layerprof

    prof = layerprof.profile(nn.Linear(2, 2), torch.zeros(1, 2), warmup=0, iters=1)
    assert prof.row("").peak_bytes is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_peak_memory_per_layer() -> None:
    import layerprof

    model = nn.Sequential(nn.Linear(256, 4096), nn.ReLU(), nn.Linear(4096, 256)).cuda()
    prof = layerprof.profile(model, torch.randn(64, 256, device="cuda"), warmup=1, iters=3)
    assert prof.row("0").peak_bytes is not None and prof.row("0").peak_bytes >= 64 * 4096 * 4
    assert prof.row("").peak_bytes >= prof.row("0").peak_bytes


def test_ops_mode_profile_memory_gives_peaks_on_cpu() -> None:
    import layerprof
    from layerprof.capture.options import OpOptions

    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8))
    prof = layerprof.profile(
        model, torch.randn(32, 64), warmup=0, iters=2, ops=OpOptions(profile_memory=True)
    )
    out0 = 32 * 256 * 4
    assert prof.row("0").peak_bytes is not None and prof.row("0").peak_bytes >= out0
    assert prof.row("").peak_bytes >= prof.row("0").peak_bytes  # a parent contains its children
    assert prof.row("1").peak_bytes is not None  # profiled: 0 or more, never unknown


def test_layer_peaks_from_events() -> None:
    from layerprof.trace.attribution import layer_peaks
    from layerprof.trace.kineto import tables_from_documents

    def span(name: str, ts: int, dur: int) -> dict[str, object]:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    def alloc(tid: int, ts: int, nbytes: int) -> dict[str, object]:
        args = {"Bytes": nbytes, "Device Type": 0, "Device Id": -1}
        return {"ph": "i", "name": "[memory]", "pid": 1, "tid": tid, "ts": ts, "args": args}

    events = [
        span(LAYER_RANGE, 1000, 100),
        span(LAYER_RANGE + "a", 1010, 30),
        alloc(1, 1005, 1000),  # before a: the root's own
        alloc(1, 1015, 300),
        alloc(1, 1020, -300),
        alloc(1, 1030, 50),
        alloc(1, 1060, 10),
        alloc(2, 1020, 10**6),  # another thread: not ours
    ]
    tables = tables_from_documents([{"traceEvents": events}])
    assert layer_peaks(tables, on_device=False) == {"": 1300, "a": 300}
