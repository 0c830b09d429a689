"""Distributed analyses from traces: step breakdown, collectives, queues, memory
timeline, stragglers. Hand-built multi-rank traces whose numbers are worked out
in the comments, properties of the partition, bad input, and the codec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerprof import codec
from layerprof.analysis.diagnose import diagnose, diagnose_run
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Run
from layerprof.pivot.sections.distributed import BREAKDOWN_PARTS, bus_factor
from layerprof.render.formats import ConsoleRenderer
from layerprof.trace import analyze
from layerprof.trace.distributed.comm import collective_kind
from layerprof.trace.intervals import lane, partition
from layerprof.traceformat import STEP_PREFIX
from tests.support.kineto_docs import gpu_op, rank_doc, span, write

S = 10  # every time below is in units of 10 µs, so a step is 1 ms
US = 1000


def two_ranks(tmp_path: Path, **rank1: Any) -> Run:
    write(tmp_path, rank_doc(0, late=0), "r0.json")
    write(tmp_path, rank_doc(1, **{"late": 10, "clock": 5_000_000.0, **rank1}), "r1.json")
    return analyze(tmp_path)


def test_breakdown_partitions_each_step(tmp_path: Path) -> None:
    run = two_ranks(tmp_path)
    r0, r1 = run.ranks
    assert r0.trace.breakdown is not None and r1.trace.breakdown is not None
    ms = S * US  # one unit in ns
    expect0 = dict(compute=20, overlap=10, communication=20, memcpy=5, memset=0, runtime=7,
                   dataloader=10, cpu=13, idle=15)  # fmt: skip
    expect1 = {**expect0, "compute": 30, "overlap": 0}
    for profile, expect in ((r0, expect0), (r1, expect1)):
        assert profile.trace.breakdown is not None
        assert [s.step for s in profile.trace.breakdown.steps] == [
            "ProfilerStep#1",
            "ProfilerStep#2",
        ]
        for s in profile.trace.breakdown.steps:
            assert s.wall_ns == 100 * ms and s.device == profile.rank
            assert dict(s.parts()) == {k: v * ms for k, v in expect.items()}
            assert sum(ns for _, ns in s.parts()) == s.wall_ns


def test_collectives_kind_size_bandwidth_and_overlap(tmp_path: Path) -> None:
    r0, r1 = two_ranks(tmp_path).ranks
    c0 = r0.trace.communication
    assert c0 is not None and c0.on_device
    (first, second) = c0.collectives
    assert (first.kind, first.group, first.group_size, first.bytes) == ("all_reduce", "0", 2, 4000)
    assert (first.step, first.index, second.step, second.index) == (
        "ProfilerStep#1", 0, "ProfilerStep#2", 0)  # fmt: skip
    assert first.dur_ns == 30 * S * US and first.exposed_ns == 20 * S * US
    assert first.algbw == pytest.approx(4000 / (30 * S * US))
    assert first.busbw == pytest.approx(first.algbw * 2 * (2 - 1) / 2)
    # before it: gemm's [20, 40) (its end overlaps the collective)
    assert first.prior_top == "gemm" and first.prior_compute_ns == 20 * S * US
    # issued by the launch call at 32 (times are relative to the file's first µs: step 1)
    assert first.issue_ns == 32 * S * US
    # the second: since the first ended at 70, gemm [120, 140) of step 2
    assert second.prior_compute_ns == 20 * S * US
    # whole trace: comm 2 x 30 units, overlapped 2 x 10 units
    assert (c0.comm_ns, c0.overlap_ns) == (60 * S * US, 20 * S * US)
    assert c0.overlap_pct == pytest.approx(100 / 3)
    c1 = r1.trace.communication
    assert c1 is not None and c1.overlap_ns == 0 and c1.exposed_ns == c1.comm_ns


def test_straggler_found_across_clocks(tmp_path: Path) -> None:
    run = two_ranks(tmp_path)
    s = run.stragglers
    assert s is not None
    assert s.matched == 2 and s.straggler == 1 and s.notes == ()
    r0, r1 = s.ranks
    # rank 1's clock runs 5 s ahead: recovered from the collectives' common end
    assert r1.clock_offset_ns == 5_000_000 * US and r0.clock_offset_ns == 0
    assert (r1.last, r1.median_late_ns, r1.late_ns) == (2, 10 * S * US, 2 * 10 * S * US)
    assert r1.prior_top == "gemm" and r0.last == 0
    assert s.median_skew_ns == 10 * S * US
    worst = s.worst[0]
    assert worst.last_rank == 1 and worst.skew_ns == 10 * S * US and worst.kind == "all_reduce"
    findings = [f for f in diagnose_run(run) if "straggler" in f.title]
    assert len(findings) == 1
    f = findings[0]
    assert f.title == "rank 1 is a straggler: last at 2 of 2 collectives"
    assert "median 100.0 µs after the first rank" in f.detail and "gemm" in f.detail


def test_queues_and_launches(tmp_path: Path) -> None:
    r0 = two_ranks(tmp_path).ranks[0]
    q = r0.trace.queues
    assert q is not None
    streams = {s.stream: s for s in q.streams}
    assert set(streams) == {7, 99}
    # one launch at a time, each started after its call: never more than one queued
    assert streams[7].max_length == 1 and streams[7].ops == 4
    assert q.sync_ns == 2 * 4 * S * US
    # memcpy (5 units) is longer than its 1-unit launch; gemm and nccl longer too
    assert q.short_kernels == 0 and q.kernels == 6
    assert q.full_launch_ns == 0 and q.blocked_ns == q.sync_ns


def test_memory_timeline_peak(tmp_path: Path) -> None:
    r0 = two_ranks(tmp_path).ranks[0]
    m = r0.trace.memory_timeline
    assert m is not None
    (dev,) = m.devices
    assert dev.device == "cuda:0" and dev.peak_bytes == 5000 and dev.events == 6
    assert dev.peak_op == "record_param_comms" and dev.peak_step == "ProfilerStep#1"
    assert dev.peak_ns == 33 * S * US  # relative to the file's first µs (step 1's start)
    assert [v for _, v in dev.points] == [1000, 5000, 0, 1000, 5000, 0]


def test_codec_round_trip(tmp_path: Path) -> None:
    run = two_ranks(tmp_path)
    back = codec.from_dict(codec.to_dict(run))
    assert isinstance(back, Run)
    assert back.stragglers == run.stragglers
    for a, b in zip(run.ranks, back.ranks, strict=True):
        assert (b.trace.breakdown, b.trace.communication, b.trace.queues, b.trace.memory_timeline) == (
            a.trace.breakdown, a.trace.communication, a.trace.queues, a.trace.memory_timeline)  # fmt: skip
    # files written before these sections load with them empty
    old = codec.to_dict(run)
    old.pop("stragglers")
    for r in old["ranks"]:
        for key in ("breakdown", "communication", "queues", "memory_timeline"):
            r.pop(key)
    plain = codec.from_dict(old)
    assert isinstance(plain, Run) and plain.stragglers is None
    assert all(p.trace.breakdown is None and p.trace.communication is None for p in plain.ranks)


def test_console_shows_the_sections(tmp_path: Path) -> None:
    text = ConsoleRenderer().render(two_ranks(tmp_path), width=120)
    assert "step time breakdown, device 0" in text
    assert "communication: 2 collectives" in text and "all_reduce" in text
    assert "device queues" in text and "memory timeline cuda:0: peak 4.9 KiB" in text
    assert "rank 1 arrives last most often" in text


def test_missing_rank_and_different_step_counts_are_notes(tmp_path: Path) -> None:
    write(tmp_path, rank_doc(0, late=0, world=3), "r0.json")
    write(tmp_path, rank_doc(2, late=10, world=3, steps=1), "r2.json")
    s = analyze(tmp_path).stragglers
    assert s is not None
    said = {n.kind: n.data for n in s.notes}
    assert said["missing-ranks"] == {"present": 2, "expected": 3, "missing": (1,)}
    assert said["step-counts-differ"] == {"steps": {0: 2, 2: 1}}
    assert s.matched == 1  # ProfilerStep#1 only
    assert said["unmatched-collectives"] == {"rank": 0, "unmatched": 1, "collectives": 2}


def test_collectives_that_never_match_are_a_note(tmp_path: Path) -> None:
    run = two_ranks(tmp_path, kind="broadcast")
    s = run.stragglers
    assert s is not None and s.matched == 0 and s.straggler is None
    assert any(n.kind == "no-matched-collective" for n in s.notes)
    assert all(line.unmatched == 2 for line in s.ranks)
    diagnose_run(run)  # and no finding needs a match


def test_rank_without_collectives(tmp_path: Path) -> None:
    write(tmp_path, rank_doc(0, late=0), "r0.json")
    doc = rank_doc(1, late=0)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if "nccl" not in e["name"]]
    write(tmp_path, doc, "r1.json")
    run = analyze(tmp_path)
    assert run.ranks[1].trace.communication is None
    assert (
        run.stragglers is not None
        and Note("no-collectives", "rank 1 has no collectives in its trace", {"rank": 1})
        in run.stragglers.notes
    )


def test_cpu_only_gloo_breakdown(tmp_path: Path) -> None:
    """A host-only trace: compute = CPU ops off the gloo threads, communication = gloo spans.

    main thread: aten::mm 10..40, aten::add 50..60; gloo thread: gloo:all_reduce 30..70
    (Input Dims [[256]] float: 1 KiB). Step 0..100: dataloader 0..5 first; overlap
    [30,40) 10; compute [10,30) + [50,60) = 30 - 10 ... (see asserts)."""
    events = [
        span("user_annotation", f"{STEP_PREFIX}0", 1000, 100),
        span("user_annotation", "enumerate(DataLoader)#x", 1000, 5),
        span("cpu_op", "aten::mm", 1010, 30),
        span("cpu_op", "aten::add", 1050, 10),
        span(
            "user_annotation",
            "gloo:all_reduce",
            1030,
            40,
            tid=9,
            **{"External id": 7, "Input Dims": [[256]], "Input type": ["float"]},
        ),
    ]
    p = analyze(write(tmp_path, {"traceEvents": events})).rank()
    assert p.trace.breakdown is not None
    (row,) = p.trace.breakdown.steps
    assert row.device is None
    parts = {k: v // US for k, v in row.parts() if v}
    # overlap [30,40)+[50,60) 20; compute [10,30) 20; comm [40,50)+[60,70) 20; idle 35
    assert parts == {"dataloader": 5, "compute": 20, "overlap": 20, "communication": 20, "idle": 35}
    c = p.trace.communication
    assert c is not None and not c.on_device
    (x,) = c.collectives
    assert (x.kind, x.bytes, x.device, x.issue_ns) == ("all_reduce", 1024, None, None)
    assert x.exposed_ns == 20 * US and x.prior_top == "aten::mm"


def test_launch_bound_finding(tmp_path: Path) -> None:
    """200 kernels of 1 µs, each launched by a 4 µs call: launch-bound."""
    events = [span("user_annotation", f"{STEP_PREFIX}0", 0, 2000)]
    for k in range(200):
        events.append(span("cuda_runtime", "cudaLaunchKernel", 5 + 9 * k, 4, correlation=k))
        events.append(gpu_op("kernel", "tiny", 10 + 9 * k, 1, k, 0, 7))
    p = analyze(write(tmp_path, {"traceEvents": events})).rank()
    assert p.trace.queues is not None and p.trace.queues.short_kernels == 200
    titles = [f.title for f in diagnose(p)]
    assert "100% of device ops run shorter than their launch call" in titles


def _graph_replays(launches: int, ops: int, call_us: float) -> list[dict[str, Any]]:
    """``launches`` graph launches of ``call_us`` each, replaying ``ops`` kernels of 1 µs."""
    events = [span("user_annotation", f"{STEP_PREFIX}0", 0, launches * (ops + call_us + 20))]
    t = 5.0
    for k in range(launches):
        events.append(span("cuda_runtime", "cudaGraphLaunch", t, call_us, correlation=k))
        events += [gpu_op("kernel", f"k{j}", t + 1 + j * 1.1, 1, k, 0, 7) for j in range(ops)]
        t += ops * 1.1 + call_us + 10
    return events


def test_a_graph_launch_counts_once_against_its_replayed_ops(tmp_path: Path) -> None:
    """One 500 µs graph launch replaying 300 kernels of 1 µs: each kernel against the call
    read '100% of device ops run shorter than their launch call' (300 of 300); the
    launch counts once, against the 300 µs it replayed, and no launch-bound finding."""
    p = analyze(write(tmp_path, {"traceEvents": _graph_replays(1, 300, 500)})).rank()
    q = p.trace.queues
    assert q is not None
    assert (q.kernels, q.short_kernels, q.short_kernel_ns) == (1, 1, 300 * US)
    assert (q.graph_launches, q.graph_ops) == (1, 300)
    assert not [f for f in diagnose(p) if "shorter than their launch" in f.title]
    assert codec.profile_from_dict(codec.to_dict(p)).trace.queues == q
    text = " ".join(ConsoleRenderer().render(p, width=400).split())
    assert "1 of 1 launches shorter than their call" in text
    assert "1 graph launch counted once against its 300 replayed ops summed" in text


def test_graph_launches_longer_than_their_replay_are_launch_bound(tmp_path: Path) -> None:
    """120 graph launches of 20 µs each replaying 10 kernels of 1 µs: each launch is
    longer than what it replayed, so the run is launch-bound, counted per launch."""
    p = analyze(write(tmp_path, {"traceEvents": _graph_replays(120, 10, 20)})).rank()
    q = p.trace.queues
    assert q is not None and (q.kernels, q.short_kernels) == (120, 120)
    (f,) = [f for f in diagnose(p) if "shorter than their launch" in f.title]
    assert "Each graph launch counts once" in f.detail and "1,200 ops" in f.detail


def test_full_queue_and_delay_outliers(tmp_path: Path) -> None:
    """1100 launches 1 µs apart, kernels start much later: the queue passes 1024."""
    events = [span("user_annotation", f"{STEP_PREFIX}0", 0, 10_000)]
    for k in range(1100):
        events.append(span("cuda_runtime", "cudaLaunchKernel", 1 + k, 0.5, correlation=k))
        events.append(gpu_op("kernel", "slow", 2000 + 5 * k, 5, k, 0, 7))
    p = analyze(write(tmp_path, {"traceEvents": events})).rank()
    q = p.trace.queues
    assert q is not None
    (s,) = q.streams
    assert s.max_length == 1100 - 0 and s.full_ns > 0
    # launches 1025.. saw 1024 queued before them: 76 calls of 0.5 µs blocked
    assert q.full_launch_ns == 76 * 500
    assert len(s.series) <= 2000 and max(v for _, v in s.series) == s.max_length


def test_collective_kinds() -> None:
    assert collective_kind("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)") == "all_reduce"
    assert collective_kind("c10d::_allgather_base_") == "all_gather"
    assert collective_kind("c10d::_reduce_scatter_base_") == "reduce_scatter"
    assert collective_kind("nccl:all_to_all") == "all_to_all"
    assert collective_kind("ncclDevKernel_SendRecv(ncclDevComm*)") == "send_recv"
    assert collective_kind("gloo:broadcast") == "broadcast"
    assert collective_kind("aten::mm") is None
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)


# ---- properties ---------------------------------------------------------------------

intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 20)), max_size=8)


def brute(spans: list[tuple[int, int]], size: int) -> np.ndarray:
    on = np.zeros(size, dtype=bool)
    for s, d in spans:
        on[s : s + d] = True
    return on


@settings(max_examples=200, deadline=None)
@given(k=intervals, c=intervals, m=intervals, r=intervals, lo=st.integers(0, 30),
       width=st.integers(1, 60))  # fmt: skip
def test_partition_matches_a_per_ns_count(
    k: list[tuple[int, int]], c: list[tuple[int, int]], m: list[tuple[int, int]],
    r: list[tuple[int, int]], lo: int, width: int,
) -> None:  # fmt: skip
    def as_lane(spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray([a for a, _ in spans], dtype=np.int64)
        return lane(s, s + np.asarray([d for _, d in spans], dtype=np.int64))

    order = [0b11, 0b01, 0b10, 0b100, 0b1000]
    table = partition([as_lane(x) for x in (k, c, m, r)], [(lo, lo + width)], order)
    size = 100
    K, C, M, R = (brute(x, size)[lo : lo + width] for x in (k, c, m, r))
    expect = [
        (K & C).sum(), (K & ~C).sum(), (C & ~K).sum(), (M & ~K & ~C).sum(),
        (R & ~M & ~K & ~C).sum(), (~(K | C | M | R)).sum(),
    ]  # fmt: skip
    assert table[0].tolist() == expect
    assert table.sum() == width  # a partition of the window
    assert table[0, 0] <= min(K.sum(), C.sum())  # overlap <= min(compute, comm)


@settings(max_examples=30, deadline=None)
@given(compute=intervals, comm=intervals, ops=intervals)
def test_breakdown_of_random_traces_adds_up(
    tmp_path_factory: pytest.TempPathFactory,
    compute: list[tuple[int, int]],
    comm: list[tuple[int, int]],
    ops: list[tuple[int, int]],
) -> None:
    events = [span("user_annotation", f"{STEP_PREFIX}0", 10, 50),
              span("user_annotation", f"{STEP_PREFIX}1", 60, 30)]  # fmt: skip
    for i, (s, d) in enumerate(compute):
        events.append(gpu_op("kernel", "gemm", s, d, 100 + i, 0, 7))
    for i, (s, d) in enumerate(comm):
        events.append(gpu_op("kernel", "ncclKernel_AllReduce", s, d, 200 + i, 0, 9))
    for s, d in ops:
        events.append(span("cpu_op", "aten::mm", s, d))
    if not compute and not comm:
        events.append(gpu_op("gpu_memset", "Memset", 0, 1, 1, 0, 7))
    path = write(tmp_path_factory.mktemp("t"), {"traceEvents": events})
    p = analyze(path).rank()
    assert p.trace.breakdown is not None
    K, C = brute(compute, 200), brute(comm, 200)
    origin = min(e["ts"] for e in events if e.get("ph") == "X")
    for row in p.trace.breakdown.steps:
        assert sum(ns for _, ns in row.parts()) == row.wall_ns
        lo = row.start_ns // US + origin
        window = slice(lo, lo + row.wall_ns // US)
        assert row.overlap_ns == (K[window] & C[window]).sum() * US
        assert row.overlap_ns <= min(
            row.compute_ns + row.overlap_ns, row.communication_ns + row.overlap_ns
        )
        assert set(dict(row.parts())) == set(BREAKDOWN_PARTS)


def test_html_shows_the_distributed_section(tmp_path: Path) -> None:
    from layerprof.render.formats import HtmlRenderer

    page = HtmlRenderer().render(two_ranks(tmp_path))
    assert 'id="distributed"' in page and "Step time breakdown" in page
    # one stacked bar per rank and step, a segment per non-zero part
    assert page.count("rank 1 · device 1 · ProfilerStep#") == 2
    assert 'title="Overlap: 0.100 ms (10.0%)"' in page  # rank 0: [40, 50) units of 10 µs
    assert page.count('<i class="part-overlap" style') == 2  # rank 1 never overlaps
    assert "rank 1 arrives last most often" in page


BAR = re.compile(
    r'<div class="sbar"><span class="sbar-name">([^<]*)</span><span class="sbar-track">(.*?)'
    r'</span><span class="sbar-wall">([^<]*)</span></div>'
)
SEGMENT = re.compile(r'<i class="part-(\w+)" style="width:([\d.]+)%" title="([^"]*)"></i>')


def test_html_numbers_are_the_typed_values(tmp_path: Path) -> None:
    """Every bar, segment and table cell of the card is the typed value, formatted by units."""
    from layerprof.render.html import render_html
    from layerprof.render.html.distributed import PART_LABELS
    from layerprof.units import MS, fmt_gb_s, fmt_share, human_bytes
    from tests.support.html_subjects import assert_times, tables

    run = two_ranks(tmp_path)
    page = render_html(run)
    bars = BAR.findall(page)
    steps = [(p, row) for p in run.ranks if p.trace.breakdown for row in p.trace.breakdown.steps]
    assert [name for name, _, _ in bars] == [
        f"rank {p.rank} · device {row.device} · {row.step}" for p, row in steps
    ]
    longest = max(row.wall_ns for _, row in steps)
    for (_, track, wall), (_, row) in zip(bars, steps, strict=True):
        assert wall == f"{MS.fmt(row.wall_ns)} ms"
        expect = [(part, ns) for part, ns in row.parts() if ns]
        got = SEGMENT.findall(track)
        assert [g[0] for g in got] == [part for part, _ in expect]
        for (_, width, tip), (part, ns) in zip(got, expect, strict=True):
            assert float(width) == pytest.approx(100 * ns / longest, abs=1e-3)
            label = PART_LABELS[part][0]
            assert tip == f"{label}: {MS.fmt(ns)} ms ({fmt_share(ns / row.wall_ns)})"
    t = tables(page)
    totals = [p.trace.breakdown.totals(p.rank) for p in run.ranks if p.trace.breakdown]
    assert_times(t["lp-breakdown"], "Wall (", [x["wall"] for x in totals])
    for part in BREAKDOWN_PARTS:
        if part != "memset":  # zero in every step: left out (the caption says so)
            assert_times(t["lp-breakdown"], f"{PART_LABELS[part][0]} (", [x[part] for x in totals])
    assert "Memset (" not in " ".join(t["lp-breakdown"].headers)
    assert "Zero in every step: Memset." in page
    comms = [p.trace.communication for p in run.ranks if p.trace.communication]
    comm = t["lp-comm"]
    assert_times(comm, "Communication (", [c.comm_ns for c in comms])
    assert_times(comm, "Overlapped by compute (", [c.overlap_ns for c in comms])
    assert_times(comm, "Exposed (", [c.exposed_ns for c in comms])
    assert [c.text for c in comm.column("Overlap")] == ["33.3%", "0.0%"]
    assert [c.text for c in comm.column("Collectives")] == ["2", "2"]
    groups = t["lp-collectives"]
    assert [c.text for c in groups.column("Kind")] == ["all_reduce", "all_reduce"]
    assert_times(groups, "Duration (", [sum(x.dur_ns for x in c.collectives) for c in comms])
    assert_times(groups, "Exposed (", [sum(x.exposed_ns for x in c.collectives) for c in comms])
    assert [c.text for c in groups.column("Bytes")] == [human_bytes(8000)] * 2
    algbw = [c.collectives[0].algbw for c in comms]  # both calls of a rank alike
    assert [c.text for c in groups.column("algbw (GB/s)")] == [fmt_gb_s(v) for v in algbw]
    queues = [p.trace.queues for p in run.ranks if p.trace.queues]
    assert_times(t["lp-queues"], "Host blocked (", [q.blocked_ns for q in queues])
    streams = [s for q in queues for s in q.streams]
    assert [c.text for c in t["lp-queue-streams"].column("Max queue")] == [
        str(s.max_length) for s in streams
    ]
    peaks = [
        d for p in run.ranks if p.trace.memory_timeline for d in p.trace.memory_timeline.devices
    ]
    peak = t["lp-memory-peak"]
    assert [c.text for c in peak.column("Peak allocated")] == [
        human_bytes(d.peak_bytes) for d in peaks
    ]
    assert [c.text for c in peak.column("Operator")] == ["record_param_comms"] * 2
    assert_times(peak, "At (", [d.peak_ns for d in peaks])
    s = run.stragglers
    assert s is not None
    late = t["lp-stragglers"]
    assert [c.text for c in late.column("Last")] == ["0", "2"]
    assert_times(late, "Median late (", [r.median_late_ns for r in s.ranks])
    assert_times(late, "Clock offset (", [r.clock_offset_ns for r in s.ranks])
    assert [c.text for c in late.column("Mostly before")] == ["", "gemm"]
    worst = t["lp-straggler-worst"]
    assert_times(worst, "Skew (", [m.skew_ns for m in s.worst])
    assert worst.column(worst.find("Skew ("))[0].tip == "rank 0 +0.0 µs, rank 1 +100.0 µs"


def test_collective_groups_sum_and_take_median_bandwidths() -> None:
    """The communication table's rows: by (kind, group), most time first; bandwidths are
    the median over the calls (algbw bytes/ns; busbw x 2(n-1)/n = 1.5 for a 4-way all-reduce)."""
    from dataclasses import replace

    from layerprof.pivot.sections.distributed import Collective, Communication
    from layerprof.units import fmt_gb_s

    one = Collective(kind="all_reduce", name="nccl", group="0", group_size=4, step=None,
                     index=0, seq=None, issue_ns=None, start_ns=0, dur_ns=1000, bytes=4000,
                     device=0, stream=1, exposed_ns=200, prior_compute_ns=0, prior_top=None)  # fmt: skip
    calls = (one, replace(one, dur_ns=2000, exposed_ns=0), replace(one, dur_ns=500, bytes=None))
    gather = replace(one, kind="all_gather", dur_ns=100)
    c = Communication(collectives=(*calls, gather), comm_ns=3600, overlap_ns=0, compute_ns=0,
                      origin_ns=0, on_device=True)  # fmt: skip
    reduce, gathers = c.groups()
    assert (reduce.kind, gathers.kind) == ("all_reduce", "all_gather")
    assert (reduce.total_ns, reduce.exposed_ns, reduce.bytes) == (3500, 400, 8000)
    assert reduce.algbw == pytest.approx((4.0 + 2.0) / 2)  # the call without bytes has none
    assert reduce.busbw == pytest.approx(1.5 * 3.0)
    assert gathers.busbw == pytest.approx(0.75 * 40.0)
    assert (fmt_gb_s(None), fmt_gb_s(3.14159), fmt_gb_s(1234.5)) == ("-", "3.14", "1,234.50")


def test_html_distributed_names_stay_text(tmp_path: Path) -> None:
    """A kernel named like markup reaches the page through the stragglers table as text."""
    from layerprof.render.html import render_html

    evil = "</script><b>gemm<float, 128>"
    for rank, late, clock in ((0, 0, 0.0), (1, 10, 5_000_000.0)):
        doc = rank_doc(rank, late=late, clock=clock)
        for e in doc["traceEvents"]:
            if e["name"] == "gemm":
                e["name"] = evil
        write(tmp_path, doc, f"r{rank}.json")
    page = render_html(analyze(tmp_path))
    card = page[
        page.index('id="distributed"') : page.index("</section>", page.index('id="distributed"'))
    ]
    assert evil not in card and "&lt;/script&gt;&lt;b&gt;gemm&lt;float, 128&gt;" in card


def test_html_single_cpu_rank_has_no_empty_distributed_part() -> None:
    """A one-rank CPU trace (torch.profiler, no collectives): its host breakdown and memory
    peak, one line saying there are no collectives, and nothing empty: no table without
    rows, no queue or straggler part. A profile without these sections has no card."""
    from layerprof.render.html import render_html
    from tests.support.html_subjects import (
        assert_times,
        hooks_profile,
        one_rank_run,
        section_ids,
        tables,
    )

    run = one_rank_run()
    p = run.rank()
    assert (
        p.trace.breakdown is not None and p.trace.communication is None and p.trace.queues is None
    )
    assert run.stragglers is None and p.trace.memory_timeline is not None
    page = render_html(run)
    start = page.index('id="distributed"')
    card = page[start : page.index("</section>", start)]
    assert "No collectives in this trace." in card
    for absent in ("Device queues", "Stragglers", "Collectives by kind", 'id="lp-comm"'):
        assert absent not in card
    ids = re.findall(r'<table class="data sortable" id="([^"]+)"', card)
    assert ids == ["lp-breakdown", "lp-memory-peak"]
    t = tables(page)
    assert all(t[i].rows for i in ids)
    assert [c.text for c in t["lp-breakdown"].column("Device")] == ["host"]
    assert_times(t["lp-breakdown"], "Wall (", [p.trace.breakdown.totals(None)["wall"]])
    names = [name for name, _, _ in BAR.findall(card)]
    assert names == [f"host · {row.step}" for row in p.trace.breakdown.steps]
    assert "distributed" not in section_ids(render_html(hooks_profile()))


def test_html_bars_stop_at_the_first_steps_the_table_sums_all(tmp_path: Path) -> None:
    from layerprof.render.html import render_html
    from layerprof.render.html.page import TOP_N
    from tests.support.html_subjects import tables

    run = analyze(write(tmp_path, rank_doc(0, late=0, steps=TOP_N + 5), "r0.json"))
    p = run.rank()
    assert p.trace.breakdown is not None and len(p.trace.breakdown.steps) == TOP_N + 5
    page = render_html(run)
    names = [name for name, _, _ in BAR.findall(page)]
    assert names == [f"device 0 · {row.step}" for row in p.trace.breakdown.steps[:TOP_N]]
    assert f"The first {TOP_N} steps of each rank and device; the table sums them all." in page
    assert [c.text for c in tables(page)["lp-breakdown"].column("Steps")] == [str(TOP_N + 5)]
