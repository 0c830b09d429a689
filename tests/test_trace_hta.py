"""Real Kineto traces from HTA's test data, checked against plain recomputations.

The recomputations below read the raw JSON with the stdlib and loops, so they
share no code with the reader (no numpy, no batching, no interning).
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from layerprof.trace import analyze


@cache
def raw_events(path: Path) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])


def ns(us: float) -> int:
    return round(us * 1000)


def union_length(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel"}


def torch_op_calls(events: tuple[dict[str, Any], ...]) -> Counter[str]:
    """Calls per op name as torch's key_averages counts them: build each thread's
    tree of fully contained ops and annotations, then drop an op whose parent has
    its name and no other child (EventList._remove_dup_nodes)."""
    spans = [
        e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
    ]
    spans.sort(key=lambda e: (str(e["tid"]), e["ts"], -e["dur"]))
    parent: dict[int, int] = {}
    children: Counter[int] = Counter()
    stack: list[int] = []
    tid = None
    for i, e in enumerate(spans):
        if e["tid"] != tid:
            stack, tid = [], e["tid"]
        end = e["ts"] + e["dur"]
        while stack and not (
            e["ts"] < spans[stack[-1]]["ts"] + spans[stack[-1]]["dur"]
            and end <= spans[stack[-1]]["ts"] + spans[stack[-1]]["dur"]
        ):
            stack.pop()
        if stack:
            parent[i] = stack[-1]
            children[stack[-1]] += 1
        stack.append(i)
    calls: Counter[str] = Counter()
    for i, e in enumerate(spans):
        p = parent.get(i)
        merged = p is not None and spans[p]["name"] == e["name"] and children[p] == 1
        if e["cat"] == "cpu_op" and not merged:
            calls[e["name"]] += 1
    return calls


def test_large_a100_trace(hta_dir: Path) -> None:
    path = hta_dir / "negative_queue_length_values_check" / "rank0.json.gz"
    events = raw_events(path)
    report = analyze(path).to_dict()
    rank = report["ranks"][0]
    assert rank["rank"] == 0 and report["rank_source"] == "distributedInfo.rank"
    # Steps: every ProfilerStep span, in order, to the ns.
    steps = sorted(
        (e["ts"], e["name"], e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    )
    assert [(s["name"], s["ms"]) for s in rank["steps"]] == [
        (name, dur / 1000) for _, name, dur in steps
    ]
    # Busy: union of kernel/memcpy/memset intervals on device 0.
    dev = [e for e in events if e.get("cat") in GPU_CATS and e.get("ph") == "X"]
    busy = union_length([(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in dev])
    (device,) = rank["devices"]
    assert device["busy_ms"] == pytest.approx(busy / 1e6, abs=1e-9)
    window = sum(ns(d) for _, _, d in steps)
    assert device["window_ms"] == pytest.approx(window / 1e6)
    assert device["idle_ms"] + device["busy_in_window_ms"] == pytest.approx(device["window_ms"])
    # Kernel and op tables: calls and totals per name.
    kernels = Counter()
    kernel_ns: Counter[str] = Counter()
    for e in dev:
        if e["cat"] == "kernel":
            kernels[e["name"]] += 1
            kernel_ns[e["name"]] += ns(e["dur"])
    top = rank["kernels"][0]
    assert top["calls"] == kernels[top["name"]]
    assert top["total_ms"] == pytest.approx(kernel_ns[top["name"]] / 1e6)
    assert top["total_ms"] == max(kernel_ns.values()) / 1e6
    ops = torch_op_calls(events)
    assert sum(ops.values()) < sum(1 for e in events if e.get("cat") == "cpu_op")  # merges
    for op in rank["ops"]:
        assert op["calls"] == ops[op["name"]]
        assert 0 <= op["self_ms"] <= op["total_ms"] + 1e-9
    # Memcpy by kind: bytes summed from args.
    htod = sum(e["args"]["bytes"] for e in dev if e["name"].startswith("Memcpy HtoD"))
    assert {m["kind"]: m["bytes"] for m in rank["memcpy"]}["HtoD"] == htod


def test_ns_precision_trace(hta_dir: Path) -> None:
    path = next((hta_dir / "ns_resolution_trace").glob("*.json.gz"))
    events = raw_events(path)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert any(e["dur"] != int(e["dur"]) for e in kernels)  # sub-µs durations exist
    expected = sum(ns(e["dur"]) for e in kernels)
    rank = analyze(path).to_dict()["ranks"][0]
    total = sum(k["total_ms"] for k in rank["kernels"])
    assert total * 1e6 == pytest.approx(expected, abs=len(kernels) * 1e-6)
    assert expected % 1000 != 0  # never rounded to whole µs


def test_nccl_trace_has_communication(hta_dir: Path) -> None:
    path = hta_dir / "nccl_parser_config" / "nccl_data.json.gz"
    events = raw_events(path)
    nccl = sum(ns(e["dur"]) for e in events if e.get("cat") == "kernel" and "nccl" in e["name"])
    rank = analyze(path).to_dict()["ranks"][0]
    kinds = {k["kind"]: k["total_ms"] for k in rank["kernel_kinds"]}
    assert kinds["communication"] == pytest.approx(nccl / 1e6)
    assert rank["step_source"] == "ProfilerStep" and len(rank["steps"]) == 3
    # Device time attributed to ops can never exceed the device ops' total time.
    dev_total = sum(ns(e["dur"]) for e in events if e.get("cat") in GPU_CATS) / 1e6
    outer = [o for o in rank["ops"] if o["name"].startswith("ProfilerStep")]
    assert not outer
    assert max(o["device_ms"] for o in rank["ops"]) <= dev_total + 1e-9


def test_legacy_format(hta_dir: Path) -> None:
    path = hta_dir / "trace_file_list" / "inference_rank_1.json.gz"
    events = raw_events(path)
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "Runtime"}
    delays = [
        ns(e["ts"])
        - ns(launches[e["args"]["correlation"]]["ts"] + launches[e["args"]["correlation"]]["dur"])
        for e in events
        if e.get("cat") == "Kernel" and e["args"]["correlation"] in launches
    ]
    rank = analyze(path).to_dict()["ranks"][0]
    assert rank["rank"] == 1
    assert rank["launch"]["launches"] == len(delays)
    assert rank["launch"]["delay_us"]["max"] == pytest.approx(max(delays) / 1000)
    assert rank["step_source"] == "trace"


def test_cpu_only(hta_dir: Path) -> None:
    path = next((hta_dir / "cpu_only").glob("*.json.gz"))
    report = analyze(path)
    rank = report.to_dict()["ranks"][0]
    assert rank["rank"] == 34
    assert rank["devices"] == [] and rank["has_device_data"] is False
    assert any("no device data" in n for n in rank["notes"])
    assert all(o["device_ms"] is None for o in rank["ops"])
    prof = report.to_profile()
    assert prof.meta.device == "cpu"
    assert all(o.device_ns is None for o in prof.ops)


def test_cut_off_steps(hta_dir: Path) -> None:
    amd = analyze(next((hta_dir / "amd_trace").glob("*.json.gz"))).to_dict()["ranks"][0]
    assert [s["cut_off"] for s in amd["steps"]] == [False, True]  # 9.3 ms then 0.05 ms
    assert amd["step_ms"]["n"] == 1
    triton = analyze(hta_dir / "triton_example").to_dict()["ranks"][0]
    assert triton["steps"][0]["cut_off"] is True  # ends 13 s after the window closed
    assert triton["step_ms"] is None


def test_two_ranks_side_by_side(hta_dir: Path, tmp_path: Path) -> None:
    report = analyze(hta_dir / "trace_filter").to_dict()
    assert report["rank_source"] == "distributedInfo.rank"
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    per_rank: dict[str, dict[int, float]] = {}
    for rank in (0, 1):
        for e in raw_events(hta_dir / "trace_filter" / f"sampled_rank-{rank}.json.gz"):
            if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"):
                per_rank.setdefault(e["name"], {})[rank] = e["dur"] / 1000
    cross = {s["name"]: s for s in report["cross_rank"]["steps"]}
    assert set(cross) == set(per_rank)
    for name, by_rank in per_rank.items():
        assert cross[name]["slowest_rank"] == max(by_rank, key=by_rank.__getitem__)
        assert cross[name]["spread_ms"] == pytest.approx(
            max(by_rank.values()) - min(by_rank.values())
        )
    # The same files under rank-N names without distributedInfo would use the names;
    # here a copy keeps distributedInfo, which wins.
    for f in (hta_dir / "trace_filter").iterdir():
        shutil.copy(f, tmp_path / f.name.replace("sampled_rank-", "x_rank_"))
    assert analyze(tmp_path).to_dict()["rank_source"] == "distributedInfo.rank"


def test_every_real_trace_analyzes(hta_dir: Path) -> None:
    files = sorted(hta_dir.rglob("*.json.gz"))
    assert files
    for f in files:
        report = analyze(f)
        for rank in report.ranks:
            for row in rank.modules + rank.annotations:
                assert 0 <= row.self_ns <= row.total_ns
            for op in rank.ops:
                assert 0 <= op.self_ns <= op.total_ns
        # Overlapping annotations on one thread make total > self + children
        # impossible to keep with self >= 0, so only the pivot's shape is checked.
        prof = report.to_profile()
        assert prof.meta.source == "trace" and prof.layers
