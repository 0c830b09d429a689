"""Hand-built traces whose every number is worked out in the comments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from layerprof import codec
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import OpStat
from layerprof.pivot.sections.trace import DeviceMemory
from layerprof.trace import analyze
from layerprof.trace import reader as reader_mod
from layerprof.traceformat import STEP_PREFIX
from tests.support.kineto_docs import span, write

US = 1000  # ns per µs


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
        span("user_annotation", f"{STEP_PREFIX}{n}", t0, 100),
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


@pytest.fixture
def rank(tmp_path: Path) -> Profile:
    return analyze(write(tmp_path, two_steps(), "t.json.gz")).rank()


def ops_of(p: Profile) -> dict[str, OpStat]:
    return {o.name: o for o in p.ops}


def test_steps(tmp_path: Path) -> None:
    run = analyze(write(tmp_path, two_steps(), "t.json.gz"))
    assert codec.to_dict(run)["schema"] == "layerprof.trace/2"
    assert run.rank_source == "distributedInfo.rank"
    rank = run.rank()
    assert rank.rank == 3
    assert rank.trace.steps is not None and rank.trace.steps.source == "ProfilerStep"
    assert [(s.name, s.dur_ns, s.cut_off) for s in rank.trace.steps.steps] == [
        ("ProfilerStep#1", 100 * US, False),
        ("ProfilerStep#2", 100 * US, False),
    ]
    assert rank.latency is not None
    assert rank.latency.median == 100 * US and rank.latency.n == 2


def test_ops_self_total_device(rank: Profile) -> None:
    """Per step (both steps hold the same host spans): medians of the step sums."""
    ops = ops_of(rank)
    linear, addmm, relu = ops["aten::linear"], ops["aten::addmm"], ops["aten::relu"]
    assert linear.calls == 1
    assert linear.total_ns == 40 * US
    assert linear.self_ns == 10 * US  # 40 - 30
    # the launch calls (5 µs; 5 + 2 µs in step 2) are not addmm's own time
    assert addmm.samples is not None and addmm.samples.self_ns == [25 * US, 23 * US]
    # gemm 20 (step 1) and gemm 20 + gemm2 5 (step 2): inclusive for linear
    assert addmm.samples.device_ns == [20 * US, 25 * US]
    assert addmm.device_ns == pytest.approx(22.5 * US)
    assert linear.device_ns == pytest.approx(22.5 * US)
    assert relu.device_ns == 2 * US


def test_op_rows_are_medians_per_iteration_like_layer_rows(tmp_path: Path) -> None:
    """One slow iteration (an outlier) moves neither the op row nor the layer row."""
    events = []
    for n, relu_us in enumerate((10, 10, 300, 10, 10)):
        t0 = 1000 * n
        events += [
            span("user_annotation", f"{STEP_PREFIX}{n}", t0, 900),
            span("python_function", "nn.Module: Net_0", t0 + 5, 800),
            span("cpu_op", "aten::relu", t0 + 10, relu_us, **{"External id": n + 1}),
        ]
    prof = analyze(write(tmp_path, {"traceEvents": events})).rank()
    relu = ops_of(prof)["aten::relu"]
    assert relu.self_ns == relu.total_ns == 10 * US  # the mean would be 68 µs
    assert relu.calls == 1
    assert prof.samples["Net"].total_ns.median == 800 * US
    text = str(prof.render("console", width=160))
    assert "op times: median per iteration; calls: mean per iteration" in text


def test_device_busy_idle_and_gaps(rank: Profile) -> None:
    (dev,) = rank.trace.devices
    assert dev.busy_ns == 53 * US  # 20+2+4 + 20+5+2
    assert dev.window_ns == 200 * US
    assert dev.idle_ns == 147 * US
    assert dev.utilization == pytest.approx(0.053 / 0.2)
    assert dev.kernel_ns == 49 * US
    assert dev.memcpy_ns == 4 * US
    # Adjacent steps merge into one window [100, 300] µs. Gaps:
    # [100,130] host, [150,166] host, [168,190] host, [194,230] host (gemm launched
    # at 225), [250,255] short (gemm2 launched at 228), [260,266] host, [268,300] other.
    assert dev.host_wait_ns == 110 * US
    assert dev.short_gap_ns == 5 * US
    assert dev.other_idle_ns == 32 * US
    assert dev.host_wait_ns + dev.short_gap_ns + dev.other_idle_ns == dev.idle_ns


def test_launch_memcpy_kernels(rank: Profile) -> None:
    launch = rank.trace.launches
    assert launch is not None and launch.launches == 6
    # delays: 5, 0, 7 and 5, 27, 0 µs
    assert launch.delay_ns is not None
    assert launch.delay_ns.median == 5 * US and launch.delay_ns.max == 27 * US
    assert launch.unmatched_device_ops == 0
    (htod,) = rank.trace.memcpy
    assert (htod.kind, htod.calls, htod.bytes) == ("HtoD", 1, 4000)
    assert htod.gb_per_s == pytest.approx(1.0)
    kernels = {k.name: k for k in rank.trace.kernels}
    assert kernels["gemm"].calls == 2
    assert kernels["gemm"].mean_ns == 20 * US
    assert {k.kind: k.total_ns for k in rank.trace.kinds} == {"compute": 49 * US, "memory": 4 * US}


def test_module_tree_and_profile(tmp_path: Path) -> None:
    prof = analyze(write(tmp_path, two_steps())).rank()
    rows = {r.path: r for r in prof.rows()}
    assert set(rows) == {"Net", "Net.Linear"}
    net, lin = rows["Net"], rows["Net.Linear"]
    assert net.type == "Net" and lin.parent == "Net"
    assert net.self_ns == 25 * US  # per step
    assert lin.device_total_ns == pytest.approx(22.5 * US)  # median of 20 and 25
    assert prof.samples["Net"].device_total_ns == [22 * US, 27 * US]  # + relu's 2 µs
    assert prof.meta.source == "trace"
    assert prof.meta.model == "t"
    assert prof.latency_ns == (100 * US, 100 * US)
    samples = prof.samples["Net.Linear"]
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
    whole = codec.to_dict(analyze(path), samples=True)
    monkeypatch.setattr(reader_mod, "BATCH_BYTES", 7)
    assert codec.to_dict(analyze(path), samples=True) == whole


def test_cut_off_last_step(tmp_path: Path) -> None:
    doc = two_steps()
    # A third step that runs past the profiler window end (400 µs).
    doc["traceEvents"].append(span("user_annotation", f"{STEP_PREFIX}3", 300, 5000))
    rank = analyze(write(tmp_path, doc)).rank()
    assert rank.trace.steps is not None
    assert [s.cut_off for s in rank.trace.steps.steps] == [False, False, True]
    assert rank.latency is not None and rank.latency.n == 2
    assert rank.trace.devices[0].window_ns == 200 * US
    assert any(n.kind == "step-cut-off" and n.data["step"] == f"{STEP_PREFIX}3" for n in rank.notes)


def test_short_last_step_is_cut_off(tmp_path: Path) -> None:
    doc = two_steps()
    doc["traceEvents"].append(span("user_annotation", f"{STEP_PREFIX}3", 300, 2))
    rank = analyze(write(tmp_path, doc)).rank()
    assert rank.trace.steps is not None and rank.trace.steps.steps[-1].cut_off is True


def test_quirks(tmp_path: Path) -> None:
    base = 1_700_000_000_000_000  # epoch µs, like legacy traces
    events = [
        span("user_annotation", f"{STEP_PREFIX}1", base, 100, tid="main thread"),
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
    rank = analyze(write(tmp_path, {"traceEvents": events})).rank()
    ops = ops_of(rank)
    assert "zero" not in ops
    assert any(n.kind == "dropped-ts0" for n in rank.notes)
    weird = ops["weird??name"]
    assert weird.total_ns == 50_001  # ns digits kept on an epoch-µs timeline
    # a child overrunning its parent by more than 1 µs is not its child (as in
    # torch's event tree): the parent keeps its whole time as self time
    assert weird.self_ns == 50_001
    assert ops["nodur"].total_ns == 0
    assert rank.trace.steps is not None and rank.trace.steps.steps[0].dur_ns == 100 * US
    assert any(n.kind == "no-device-data" for n in rank.notes)
    assert rank.trace.devices == () and rank.trace.launches is None
    assert ops["overrun"].device_ns is None


def test_no_steps_uses_outermost_record_function(tmp_path: Path) -> None:
    events = [
        span("user_annotation", "infer", 0, 50),
        span("user_annotation", "inner", 10, 20),
        span("cpu_op", "aten::mm", 12, 5),
        span("user_annotation", "infer", 100, 70),
    ]
    prof = analyze(write(tmp_path, {"traceEvents": events})).rank()
    assert prof.trace.steps is not None and prof.trace.steps.source == "record_function"
    assert [s.dur_ns for s in prof.trace.steps.steps] == [50 * US, 70 * US]
    paths = {a.path: a for a in prof.trace.annotations}
    assert paths["infer.inner"].parent == "infer"
    assert paths["infer"].self_ns == 120 * US - 20 * US
    # no modules: the annotation tree is the layer tree
    assert [layer.path for layer in prof.layers] == ["infer", "infer.inner"]


def test_group_by_shape(tmp_path: Path) -> None:
    events = [
        span("cpu_op", "aten::mm", 0, 5, **{"Input Dims": [[2, 3], [3, 4]]}),
        span("cpu_op", "aten::mm", 10, 7, **{"Input Dims": [[8, 3], [3, 4]]}),
        span("cpu_op", "aten::mm", 20, 5, **{"Input Dims": [[2, 3], [3, 4]]}),
    ]
    path = write(tmp_path, {"traceEvents": events})
    plain = analyze(path).rank().ops
    assert [(o.name, o.calls) for o in plain] == [("aten::mm", 3)]
    shaped = analyze(path, group_by_shape=True).rank().ops
    assert [(o.input_shapes, o.calls) for o in shaped] == [
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
    memory = analyze(write(tmp_path, {"traceEvents": events})).rank().trace.memory
    assert memory is not None
    assert memory.devices == (
        DeviceMemory(
            device="cuda:0",
            peak_allocated=5120,
            allocations=3,
            allocated_bytes=5220,
            freed_bytes=1024,
        ),
    )
    assert [(r.op, r.bytes) for r in memory.top_ops] == [
        ("aten::cat", 4096),
        ("aten::empty", 1024),
        ("(outside ops)", 100),
    ]


def test_directory_ranks_from_file_names(tmp_path: Path) -> None:
    for rank, slow in ((0, 100), (1, 130)):
        events = [
            span("user_annotation", f"{STEP_PREFIX}5", 0, slow),
            span("user_annotation", f"{STEP_PREFIX}6", 200, 100),
            gpu("kernel", "ncclKernel_AllReduce", 10, 40 + rank, 1),
        ]
        write(tmp_path, {"traceEvents": events}, f"worker_rank_{rank}.pt.trace.json")
    run = analyze(tmp_path)
    assert run.rank_source == "file name (rank-N / rank_N)"
    assert [p.rank for p in run.ranks] == [0, 1]
    cross = run.cross
    assert cross is not None
    step5 = next(s for s in cross.steps if s.name == "ProfilerStep#5")
    assert step5.slowest_rank == 1
    assert step5.spread_ns == 30 * US
    assert cross.slowest_rank == 1
    assert [r.communication_ns for r in cross.ranks] == [40 * US, 41 * US]
    assert run.rank(1).meta.extra["rank"] == 1


def test_directory_ranks_from_file_order(tmp_path: Path) -> None:
    for name in ("b.json", "a.json"):
        write(tmp_path, {"traceEvents": [span("cpu_op", name, 0, 1)]}, name)
    run = analyze(tmp_path)
    assert run.rank_source == "file order"
    assert [Path(p.trace.source.file).name for p in run.ranks if p.trace.source] == [
        "a.json",
        "b.json",
    ]


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
    rank = analyze(write(tmp_path, events)).rank()
    assert rank.trace.launches is not None and rank.trace.launches.launches == 1
    assert (
        rank.trace.launches.delay_ns is not None and rank.trace.launches.delay_ns.median == 6 * US
    )
    assert rank.trace.steps is not None and rank.trace.steps.source == "trace"


def test_to_dict_top_limits_lists(tmp_path: Path) -> None:
    run = analyze(write(tmp_path, two_steps()))
    d = run.to_dict(top=1)["ranks"][0]
    assert len(d["ops"]) == 1 and len(d["kernels"]) == 1
    assert len(run.to_dict()["ranks"][0]["ops"]) == 3
    orjson.dumps(run.to_dict())  # JSON-serializable as is


def test_console_report(tmp_path: Path) -> None:
    text = str(analyze(write(tmp_path, two_steps())).render("console", width=200, top=5))
    for expected in ("ProfilerStep#1", "aten::linear", "gemm", "Net", "launch delay", "HtoD"):
        assert expected in text


def test_import_does_not_import_torch() -> None:
    code = "import sys, layerprof.trace; sys.exit(int('torch' in sys.modules or 'pandas' in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_module_paths_from_layerprof_header(tmp_path: Path) -> None:
    doc = two_steps()
    doc["layerprof"] = {"module_paths": {"Net_0": "", "Net_0.Linear_0": "fc"}}
    prof = analyze(write(tmp_path, doc)).rank()
    assert {r.path: r.parent for r in prof.rows()} == {"": None, "fc": ""}
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
    from layerprof.pivot.profile import Profile

    prof = analyze(write(tmp_path, two_steps())).rank()
    summary_only = Profile.load(prof.save(tmp_path / "s.json"))
    assert summary_only.samples["Net.Linear"].total_ns.values is None
    assert summary_only.row("Net.Linear") == prof.row("Net.Linear")
    loaded = Profile.load(prof.save(tmp_path / "p.json", samples=True))
    assert loaded.meta.source == "trace"
    assert loaded.latency_ns == prof.latency_ns
    assert loaded.samples["Net.Linear"].device_total_ns == (20 * US, 25 * US)
    assert [o.name for o in loaded.ops] == [o.name for o in prof.ops]
