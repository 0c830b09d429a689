"""Hand-built traces whose every number is worked out in the comments."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from layerprof.trace import SCHEMA, analyze
from layerprof.trace import reader as reader_mod

US = 1000  # ns per µs


def span(cat: str, name: str, ts: float, dur: float, tid: Any = 1, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def gpu(cat: str, name: str, ts: float, dur: float, corr: int, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": 7, "correlation": corr, **args},
    }


def step_events(t0: float, *, second_kernel: bool, memcpy: bool) -> list[dict[str, Any]]:
    """One ProfilerStep of 100 µs at t0 (times in µs relative to t0):

    0   ProfilerStep#            100
    5   nn.Module: Net_0         70
    8     nn.Module: Linear_0    45
    10      aten::linear         40  (self 10)
    15        aten::addmm        30  launches gemm (rt 20..25, kernel 30..50)
                                      [+ gemm2: rt 26..28, kernel 55..60]
    60      aten::relu           10  launches relu_kernel (rt 62..66, kernel 66..68)
    80  cudaMemcpyAsync (no op)  3   -> HtoD memcpy 90..94, 4000 bytes
    """
    n = int(t0 // 100)
    c = 100 + 10 * n
    ev = [
        span("user_annotation", f"ProfilerStep#{n}", t0, 100),
        span("python_function", "nn.Module: Net_0", t0 + 5, 70),
        span("python_function", "nn.Module: Linear_0", t0 + 8, 45),
        span("python_function", "torch/nn/modules/module.py(1): _call_impl", t0 + 8, 45),
        span("cpu_op", "aten::linear", t0 + 10, 40, **{"External id": c}),
        span("cpu_op", "aten::addmm", t0 + 15, 30, **{"External id": c + 1}),
        span("cuda_runtime", "cudaLaunchKernel", t0 + 20, 5, correlation=c),
        gpu("kernel", "gemm", t0 + 30, 20, c),
        span("cpu_op", "aten::relu", t0 + 60, 10, **{"External id": c + 2}),
        span("cuda_runtime", "cudaLaunchKernel", t0 + 62, 4, correlation=c + 1),
        gpu("kernel", "relu_kernel", t0 + 66, 2, c + 1),
    ]
    if second_kernel:
        ev.append(span("cuda_runtime", "cudaLaunchKernel", t0 + 26, 2, correlation=c + 2))
        ev.append(gpu("kernel", "gemm2", t0 + 55, 5, c + 2))
    if memcpy:
        ev.append(span("cuda_runtime", "cudaMemcpyAsync", t0 + 80, 3, correlation=c + 3))
        ev.append(
            gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", t0 + 90, 4, c + 3, bytes=4000)
        )
    return ev


def two_steps() -> dict[str, Any]:
    events = step_events(100, second_kernel=False, memcpy=True)
    events += step_events(200, second_kernel=True, memcpy=False)
    events.append(
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 400}
    )
    # Top-level keys after traceEvents, like newer Kineto files.
    return {"traceEvents": events, "distributedInfo": {"rank": 3}, "baseTimeNanoseconds": 1}


def write(tmp_path: Path, doc: Any, name: str = "t.json") -> Path:
    path = tmp_path / name
    raw = orjson.dumps(doc)
    path.write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    return path


@pytest.fixture
def report_dict(tmp_path: Path) -> dict[str, Any]:
    return analyze(write(tmp_path, two_steps(), "t.json.gz")).to_dict()


def test_steps(report_dict: dict[str, Any]) -> None:
    rank = report_dict["ranks"][0]
    assert report_dict["schema"] == SCHEMA
    assert report_dict["rank_source"] == "distributedInfo.rank"
    assert rank["rank"] == 3
    assert rank["step_source"] == "ProfilerStep"
    assert [(s["name"], s["ms"], s["cut_off"]) for s in rank["steps"]] == [
        ("ProfilerStep#1", 0.1, False),
        ("ProfilerStep#2", 0.1, False),
    ]
    assert rank["step_ms"]["median"] == pytest.approx(0.1)
    assert rank["step_ms"]["n"] == 2


def test_ops_self_total_device(report_dict: dict[str, Any]) -> None:
    ops = {o["name"]: o for o in report_dict["ranks"][0]["ops"]}
    linear, addmm, relu = ops["aten::linear"], ops["aten::addmm"], ops["aten::relu"]
    assert linear["calls"] == 2
    assert linear["total_ms"] == pytest.approx(0.080)
    assert linear["self_ms"] == pytest.approx(0.020)  # 2 x (40 - 30)
    assert addmm["self_ms"] == pytest.approx(0.060)  # runtime calls are not child ops
    # gemm 20 + (gemm 20 + gemm2 5), inclusive for linear, own for addmm.
    assert addmm["device_ms"] == pytest.approx(0.045)
    assert linear["device_ms"] == pytest.approx(0.045)
    assert linear["device_self_ms"] == pytest.approx(0.0)
    assert relu["device_ms"] == pytest.approx(0.004)


def test_device_busy_idle_and_gaps(report_dict: dict[str, Any]) -> None:
    (dev,) = report_dict["ranks"][0]["devices"]
    assert dev["busy_ms"] == pytest.approx(0.053)  # 20+2+4 + 20+5+2
    assert dev["window_ms"] == pytest.approx(0.200)
    assert dev["idle_ms"] == pytest.approx(0.147)
    assert dev["utilization"] == pytest.approx(0.053 / 0.2)
    assert dev["kernel_ms"] == pytest.approx(0.049)
    assert dev["memcpy_ms"] == pytest.approx(0.004)
    gaps = dev["idle_breakdown_ms"]
    # Adjacent steps merge into one window [100, 300] µs. Gaps:
    # [100,130] host, [150,166] host, [168,190] host, [194,230] host (gemm launched
    # at 225), [250,255] short (gemm2 launched at 228), [260,266] host, [268,300] other.
    assert gaps["host_wait"] == pytest.approx(0.110)
    assert gaps["short_gap"] == pytest.approx(0.005)
    assert gaps["other"] == pytest.approx(0.032)
    assert sum(gaps.values()) == pytest.approx(dev["idle_ms"])


def test_launch_memcpy_kernels(report_dict: dict[str, Any]) -> None:
    rank = report_dict["ranks"][0]
    launch = rank["launch"]
    assert launch["launches"] == 6
    # delays: 5, 0, 7 and 5, 27, 0 µs
    assert launch["delay_us"]["median"] == pytest.approx(5.0)
    assert launch["delay_us"]["max"] == pytest.approx(27.0)
    assert launch["unmatched_device_ops"] == 0
    (htod,) = rank["memcpy"]
    assert (htod["kind"], htod["calls"], htod["bytes"]) == ("HtoD", 1, 4000)
    assert htod["gb_per_s"] == pytest.approx(1.0)
    kernels = {k["name"]: k for k in rank["kernels"]}
    assert kernels["gemm"]["calls"] == 2
    assert kernels["gemm"]["mean_ms"] == pytest.approx(0.020)
    kinds = {k["kind"]: k["total_ms"] for k in rank["kernel_kinds"]}
    assert kinds == pytest.approx({"compute": 0.049, "memory": 0.004})


def test_module_tree_and_profile(tmp_path: Path) -> None:
    report = analyze(write(tmp_path, two_steps()))
    modules = {m["path"]: m for m in report.to_dict()["ranks"][0]["modules"]}
    assert set(modules) == {"Net_0", "Net_0.Linear_0"}
    net, lin = modules["Net_0"], modules["Net_0.Linear_0"]
    assert net["type"] == "Net" and lin["parent"] == "Net_0"
    assert net["self_ms"] == pytest.approx(2 * 0.025)
    assert lin["device_ms"] == pytest.approx(0.045)
    assert net["device_ms"] == pytest.approx(0.049)  # memcpy launch is outside Net_0
    prof = report.to_profile()
    assert prof.meta.source == "trace"
    assert prof.meta.model == "t"
    assert prof.latency_ns == (100 * US, 100 * US)
    samples = prof.samples["Net_0.Linear_0"]
    assert samples.total_ns == (45 * US, 45 * US)
    assert samples.device_total_ns == (20 * US, 25 * US)
    for root in prof.tree():
        root.self_check()
    assert {o.name for o in prof.ops} >= {"aten::linear", "aten::relu"}
    assert all(o.device_ns is not None for o in prof.ops)


def test_batches_split_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny batches give the same report as one batch (boundaries inside args too)."""
    doc = two_steps()
    doc["deviceProperties"] = [{"id": 0, "name": "GPU, {x}"}, {"id": 1, "name": "}, {"}]
    path = write(tmp_path, doc)
    whole = analyze(path).to_dict()
    monkeypatch.setattr(reader_mod, "BATCH_BYTES", 7)
    assert analyze(path).to_dict() == whole


def test_cut_off_last_step(tmp_path: Path) -> None:
    doc = two_steps()
    # A third step that runs past the profiler window end (400 µs).
    doc["traceEvents"].append(span("user_annotation", "ProfilerStep#3", 300, 5000))
    rank = analyze(write(tmp_path, doc)).to_dict()["ranks"][0]
    assert [s["cut_off"] for s in rank["steps"]] == [False, False, True]
    assert rank["step_ms"]["n"] == 2
    assert rank["devices"][0]["window_ms"] == pytest.approx(0.2)
    assert any("ProfilerStep#3" in n and "cut off" in n for n in rank["notes"])


def test_short_last_step_is_cut_off(tmp_path: Path) -> None:
    doc = two_steps()
    doc["traceEvents"].append(span("user_annotation", "ProfilerStep#3", 300, 2))
    rank = analyze(write(tmp_path, doc)).to_dict()["ranks"][0]
    assert rank["steps"][-1]["cut_off"] is True


def test_quirks(tmp_path: Path) -> None:
    base = 1_700_000_000_000_000  # epoch µs, like legacy traces
    events = [
        span("user_annotation", "ProfilerStep#1", base, 100, tid="main thread"),
        span("cpu_op", "weird\x01\x1fname", base + 10, 50.001, tid="main thread"),
        # overlapping child that overruns its parent's end
        span("cpu_op", "overrun", base + 40, 30, tid="main thread"),
        # no dur at all
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "nodur",
            "pid": 1,
            "tid": "main thread",
            "ts": base + 5,
        },
        # a ts == 0 block from a broken clock
        span("cpu_op", "zero", 0, 10, tid="main thread"),
    ]
    rank = analyze(write(tmp_path, {"traceEvents": events})).to_dict()["ranks"][0]
    ops = {o["name"]: o for o in rank["ops"]}
    assert "zero" not in ops
    assert any("ts == 0" in n for n in rank["notes"])
    weird = ops["weird??name"]
    assert weird["total_ms"] == 0.050001  # ns digits kept on an epoch-µs timeline
    # a child overrunning its parent by more than 1 µs is not its child (as in
    # torch's event tree): the parent keeps its whole time as self time
    assert weird["self_ms"] == 0.050001
    assert ops["nodur"]["total_ms"] == 0
    assert rank["steps"][0]["ms"] == pytest.approx(0.1)
    assert "no device data (CPU-only trace): device columns are absent" in rank["notes"]
    assert rank["devices"] == [] and rank["launch"] is None
    assert ops["overrun"]["device_ms"] is None


def test_no_steps_uses_outermost_record_function(tmp_path: Path) -> None:
    events = [
        span("user_annotation", "infer", 0, 50),
        span("user_annotation", "inner", 10, 20),
        span("cpu_op", "aten::mm", 12, 5),
        span("user_annotation", "infer", 100, 70),
    ]
    report = analyze(write(tmp_path, {"traceEvents": events}))
    rank = report.to_dict()["ranks"][0]
    assert rank["step_source"] == "record_function"
    assert [s["ms"] for s in rank["steps"]] == [0.05, 0.07]
    paths = {a["path"]: a for a in rank["annotations"]}
    assert paths["infer.inner"]["parent"] == "infer"
    assert paths["infer"]["self_ms"] == pytest.approx(0.120 - 0.020)
    prof = report.to_profile()  # no modules: the annotation tree is the layer tree
    assert [layer.path for layer in prof.layers] == ["infer", "infer.inner"]


def test_group_by_shape(tmp_path: Path) -> None:
    events = [
        span("cpu_op", "aten::mm", 0, 5, **{"Input Dims": [[2, 3], [3, 4]]}),
        span("cpu_op", "aten::mm", 10, 7, **{"Input Dims": [[8, 3], [3, 4]]}),
        span("cpu_op", "aten::mm", 20, 5, **{"Input Dims": [[2, 3], [3, 4]]}),
    ]
    path = write(tmp_path, {"traceEvents": events})
    plain = analyze(path).to_dict()["ranks"][0]["ops"]
    assert [(o["name"], o["calls"]) for o in plain] == [("aten::mm", 3)]
    shaped = analyze(path, group_by_shape=True).to_dict()["ranks"][0]["ops"]
    assert [(o["input_shapes"], o["calls"]) for o in shaped] == [
        ("[2, 3], [3, 4]", 2),
        ("[8, 3], [3, 4]", 1),
    ]


def test_memory_instants(tmp_path: Path) -> None:
    def mem(ts: float, nbytes: int, total: int) -> dict[str, Any]:
        return {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[memory]",
            "pid": 1,
            "tid": 1,
            "ts": ts,
            "args": {"Bytes": nbytes, "Total Allocated": total, "Device Type": 1, "Device Id": 0},
        }

    events = [
        span("cpu_op", "aten::empty", 0, 10),
        mem(2, 1024, 1024),
        span("cpu_op", "aten::cat", 20, 10),
        mem(25, 4096, 5120),
        mem(28, -1024, 4096),
        mem(40, 100, 4196),  # outside any op
    ]
    memory = analyze(write(tmp_path, {"traceEvents": events})).to_dict()["ranks"][0]["memory"]
    assert memory["devices"] == [
        {
            "device": "cuda:0",
            "peak_allocated_bytes": 5120,
            "allocations": 3,
            "allocated_bytes": 5220,
            "freed_bytes": 1024,
        }
    ]
    assert [(r["op"], r["bytes"]) for r in memory["top_ops"]] == [
        ("aten::cat", 4096),
        ("aten::empty", 1024),
        ("(outside ops)", 100),
    ]


def test_directory_ranks_from_file_names(tmp_path: Path) -> None:
    for rank, slow in ((0, 100), (1, 130)):
        events = [
            span("user_annotation", "ProfilerStep#5", 0, slow),
            span("user_annotation", "ProfilerStep#6", 200, 100),
            gpu("kernel", "ncclKernel_AllReduce", 10, 40 + rank, 1),
        ]
        write(tmp_path, {"traceEvents": events}, f"worker_rank_{rank}.pt.trace.json")
    report = analyze(tmp_path)
    d = report.to_dict()
    assert d["rank_source"] == "file name (rank-N / rank_N)"
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    cross = d["cross_rank"]
    step5 = next(s for s in cross["steps"] if s["name"] == "ProfilerStep#5")
    assert step5["slowest_rank"] == 1
    assert step5["spread_ms"] == pytest.approx(0.030)
    assert cross["slowest_rank"] == 1
    comm = [r["communication_ms"] for r in cross["ranks"]]
    assert comm == pytest.approx([0.040, 0.041])
    assert report.to_profile(1).meta.extra["rank"] == 1


def test_directory_ranks_from_file_order(tmp_path: Path) -> None:
    for name in ("b.json", "a.json"):
        write(tmp_path, {"traceEvents": [span("cpu_op", name, 0, 1)]}, name)
    d = analyze(tmp_path).to_dict()
    assert d["rank_source"] == "file order"
    assert [Path(r["file"]).name for r in d["ranks"]] == ["a.json", "b.json"]


def test_legacy_categories_and_bare_array(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "pid": 9,
            "tid": 9,
            "ts": 100,
            "dur": 4,
            "args": {"correlation": 5, "external id": 0},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 110,
            "dur": 6,
            "args": {"device": 0, "stream": 7, "correlation": 5, "external id": 0},
        },
    ]
    rank = analyze(write(tmp_path, events)).to_dict()["ranks"][0]
    assert rank["launch"]["launches"] == 1
    assert rank["launch"]["delay_us"]["median"] == pytest.approx(6.0)
    assert rank["step_source"] == "trace"


def test_to_dict_top_limits_lists(tmp_path: Path) -> None:
    report = analyze(write(tmp_path, two_steps()))
    d = report.to_dict(top=1)["ranks"][0]
    assert len(d["ops"]) == 1 and len(d["kernels"]) == 1
    assert len(report.to_dict()["ranks"][0]["ops"]) == 3
    orjson.dumps(report.to_dict())  # JSON-serializable as is


def test_console_report(tmp_path: Path) -> None:
    from rich.console import Console

    from layerprof.render.trace_console import print_trace_report

    console = Console(record=True, width=200)
    print_trace_report(analyze(write(tmp_path, two_steps())), console, top=5)
    text = console.export_text()
    for expected in ("ProfilerStep#1", "aten::linear", "gemm", "Net_0", "launch delay", "HtoD"):
        assert expected in text


def test_import_does_not_import_torch() -> None:
    code = "import sys, layerprof.trace; sys.exit(int('torch' in sys.modules or 'pandas' in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_module_paths_from_layerprof_header(tmp_path: Path) -> None:
    doc = two_steps()
    doc["layerprof"] = {"module_paths": {"Net_0": "", "Net_0.Linear_0": "fc"}}
    report = analyze(write(tmp_path, doc))
    modules = {m["path"]: m["parent"] for m in report.to_dict()["ranks"][0]["modules"]}
    assert modules == {"": None, "fc": ""}
    prof = report.to_profile()
    (root,) = prof.tree()
    assert root.row.path == "" and [c.row.path for c in root.children] == ["fc"]


def test_numpy_summary_matches_stats() -> None:
    import numpy as np

    from layerprof.stats import Summary
    from layerprof.trace.gpu import summary

    values = [5, 1, 9, 3, 3, 12, 7]
    fast = summary(np.asarray(values, dtype=np.int64))
    assert fast is not None
    slow = Summary.of(values)
    for field in ("median", "mean", "p90", "p99", "min", "max", "std", "n"):
        assert getattr(fast, field) == pytest.approx(getattr(slow, field))
    assert summary(np.zeros(0, dtype=np.int64)) is None


def test_profile_round_trips_through_save(tmp_path: Path) -> None:
    from layerprof.profile import Profile

    prof = analyze(write(tmp_path, two_steps())).to_profile()
    summary_only = Profile.load(prof.save(tmp_path / "s.json"))
    assert summary_only.samples["Net_0.Linear_0"].total_ns.values is None
    assert summary_only.row("Net_0.Linear_0") == prof.row("Net_0.Linear_0")
    loaded = Profile.load(prof.save(tmp_path / "p.json", samples=True))
    assert loaded.meta.source == "trace"
    assert loaded.latency_ns == prof.latency_ns
    assert loaded.samples["Net_0.Linear_0"].device_total_ns == (20 * US, 25 * US)
    assert [o.name for o in loaded.ops] == [o.name for o in prof.ops]
