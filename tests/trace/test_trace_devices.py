"""Device events of every platform Kineto writes count, and a trace says only what it knows
(its device when its events name one; never a dtype)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from layerprof.cli import main
from layerprof.pivot.change import side_label
from layerprof.pivot.records import Meta
from layerprof.trace import analyze


def host(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def device(cat: str, name: str, ts: float, dur: float, pid: int = 9, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": 801, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def write(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    return path


def mtia_events() -> list[dict[str, Any]]:
    """Shaped like HTA's MTIA trace: mtia_runtime calls on the host, mtia_ccp_events on
    device process 9 (kernels with a correlation, DMA requests without)."""
    return [
        host("cpu_op", "aten::mul", 0, 50, **{"External id": 1}),
        host("mtia_runtime", "runFunction", 10, 20, correlation=7),
        device(
            "mtia_ccp_events",
            "aten::mul.out-dtype_Float",
            40,
            30,
            correlation=7,
            stream=3,
            packet_ptr=1,
        ),
        device(
            "mtia_ccp_events",
            "dma_request",
            80,
            10,
            direction="DEVICE_TO_HOST",
            size=16,
            sqid=1,
            stream=3,
        ),
        device(
            "mtia_ccp_events",
            "dma_request",
            85,
            10,
            direction="HOST_TO_DEVICE",
            size=64,
            sqid=1,
            stream=3,
        ),
    ]


def test_mtia_device_events_count(tmp_path: Path) -> None:
    rank = analyze(write(tmp_path, mtia_events())).ranks[0]
    assert rank.has_device and rank.meta.device == "mtia"
    assert not any(n.kind == "no-device-data" for n in rank.notes)
    (use,) = rank.trace.devices
    assert use.device == 9
    assert use.busy_ns == 30_000 + 15_000  # the kernel, then the two overlapping DMAs
    assert [(k.name, k.calls) for k in rank.trace.kernels] == [("aten::mul.out-dtype_Float", 1)]
    assert [(m.kind, m.calls, m.total_ns) for m in rank.trace.memcpy] == [
        ("dma_request", 2, 20_000)
    ]
    ops = {o.name: o for o in rank.ops}
    assert ops["aten::mul"].device_ns == 30_000  # linked through mtia_runtime's correlation
    assert rank.trace.launches is not None and rank.trace.launches.launches == 1
    assert rank.meta.device == "mtia"


@pytest.mark.parametrize(
    ("event", "kind"),
    [
        (device("gpu_kernel_dispatch", "k", 40, 10), "unknown gpu_* category"),
        (device("npu_op", "k", 40, 10, device=3), "unknown category naming a device"),
        (device("kernel", "k", 40, 10, pid=0, device=0), "CUDA kernel"),
    ],
)
def test_device_ops_of_other_categories(tmp_path: Path, event: dict[str, Any], kind: str) -> None:
    rank = analyze(write(tmp_path, [host("cpu_op", "aten::mm", 0, 100), event])).ranks[0]
    assert rank.has_device, kind
    assert [k.name for k in rank.trace.kernels] == ["k"]


def test_device_markers_alone_are_not_a_cpu_only_trace(tmp_path: Path) -> None:
    events = [
        host("cpu_op", "aten::mm", 0, 100),
        device("gpu_user_annotation", "fwd", 10, 50, pid=0, device=0),
        device("cuda_event", "cudaEventRecord", 60, 0, pid=0, device=0),
    ]
    rank = analyze(write(tmp_path, events)).ranks[0]
    assert not rank.has_device
    (why,) = [n for n in rank.notes if n.kind == "no-device-ops"]
    assert why.data["categories"] == {"cuda_event": 1, "gpu_user_annotation": 1}
    assert not any(n.kind == "no-device-data" for n in rank.notes)
    assert rank.meta.device == ""  # device events, but of no known platform


def cuda_trace() -> list[dict[str, Any]]:
    return [
        host("cpu_op", "aten::mm", 0, 50),
        host("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1),
        device("kernel", "gemm", 20, 10, pid=0, device=0, correlation=1),
    ]


def test_a_trace_profile_says_only_what_the_trace_says(tmp_path: Path) -> None:
    gpu = analyze(write(tmp_path, cuda_trace(), "gpu.json")).rank().meta
    cpu = analyze(write(tmp_path, [host("cpu_op", "aten::mm", 0, 50)], "cpu.json"))
    assert (gpu.device, gpu.dtype) == ("cuda", "")
    assert side_label(gpu) == "gpu (cuda)"
    assert side_label(cpu.rank().meta) == "cpu (cpu)"
    unknown = Meta(model="x", device="", dtype="")
    assert side_label(unknown) == "x"
    live = Meta(model="Net", device="cpu", dtype="float32", torch="2.4")
    assert side_label(live) == "Net (cpu, float32, torch 2.4)"


def test_diff_of_two_plain_traces_invents_no_dtype(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path, cuda_trace(), "a.json")
    b = write(tmp_path, cuda_trace(), "b.json")
    assert main(["diff", str(a), str(b), "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert "a (cuda)" in out and "b (cuda)" in out
    assert "float32" not in out
