"""A step's device work measured where it ran: kernels after their host step, clocks that
disagree, a pipelined loop whose work spills into the next step, and two real serving
replays compared with another tool's device timeline (tracelens_report/gpu_timeline.csv)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from layerprof import codec
from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.stepwork import DEVICE, HOST
from layerprof.trace import analyze
from tests.support.kineto_docs import gpu_op, span, write
from tests.support.paths import DATA

US = 1000  # ns per µs
SERVING = DATA / "serving"


def launch(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return span("cuda_runtime", name, ts, dur, correlation=corr)


def profile_of(tmp_path: Path, events: list[dict[str, Any]]) -> Profile:
    return analyze(write(tmp_path, {"traceEvents": events})).rank()


def graph_after_step() -> list[dict[str, Any]]:
    """A serving step whose graph replays after the host step ended (µs):

    0    execute_4_context_0(...)_generation_4(...)   100   (host)
    10     cudaGraphLaunch                             40    corr 1
    200  k1 200..300, k2 300..350, gap, k3 360..400   (device 0, the graph's kernels)

    Host window 0..100 holds no device work; the work's own span is 200..400:
    busy 190 of 200 µs (95 %), idle 10 µs.
    """
    name = "execute_4_context_0(sq0sk0sqsq0sqsk0)_generation_4(sq4sk40sqsq4sqsk40)"
    return [
        span("user_annotation", name, 0, 100),
        launch("cudaGraphLaunch", 10, 40, 1),
        gpu_op("kernel", "k1", 200, 100, 1, 0, 7),
        gpu_op("kernel", "k2", 300, 50, 1, 0, 7),
        gpu_op("kernel", "k3", 360, 40, 1, 0, 7),
    ]


def test_kernels_after_the_host_step_are_measured_over_their_own_span(tmp_path: Path) -> None:
    p = profile_of(tmp_path, graph_after_step())
    (dev,) = p.trace.devices
    assert dev.window_ns == 200 * US
    assert dev.busy_in_window_ns == 190 * US
    assert dev.idle_ns == 10 * US
    assert dev.utilization == pytest.approx(0.95)
    assert p.trace.breakdown is not None
    (row,) = p.trace.breakdown.steps
    assert (row.start_ns, row.wall_ns) == (200 * US, 200 * US)
    assert (row.compute_ns, row.idle_ns) == (190 * US, 10 * US)
    assert p.trace.device_work is not None
    (work,) = p.trace.device_work.steps
    assert (work.window, work.ops, work.busy_ns, work.after_ns) == (DEVICE, 3, 190 * US, 300 * US)
    assert {n.kind for n in p.notes} >= {"device-window"}
    assert "clocks-disagree" not in {n.kind for n in p.notes}
    # the three graph kernels start before the 40 µs launch call returns? No: after it.
    clock = p.trace.device_work.clock(0)
    assert clock is not None and (clock.launched, clock.before_launch) == (3, 0)


def test_work_inside_the_host_step_keeps_the_host_window(tmp_path: Path) -> None:
    """Kernels 20..50 and 60..70 inside a 0..100 µs step: the window stays the host span,
    the idle time before, between and after the kernels the step's (60 µs)."""
    events = [
        span("user_annotation", "step", 0, 100),
        launch("cudaLaunchKernel", 10, 5, 1),
        gpu_op("kernel", "a", 20, 30, 1, 0, 7),
        launch("cudaLaunchKernel", 55, 3, 2),
        gpu_op("kernel", "b", 60, 10, 2, 0, 7),
    ]
    p = profile_of(tmp_path, events)
    (dev,) = p.trace.devices
    assert (dev.window_ns, dev.busy_in_window_ns, dev.idle_ns) == (100 * US, 40 * US, 60 * US)
    assert p.trace.device_work is not None
    assert [w.window for w in p.trace.device_work.steps] == [HOST]
    assert not p.trace.device_work.on_device
    assert "device-window" not in {n.kind for n in p.notes}


def test_clocks_that_disagree_are_named_and_measured(tmp_path: Path) -> None:
    """The device's clock runs 300 µs behind the host's: kernel a starts at 50, before its
    launch call began (at 100): a lead of 50 µs. The window is the work's own span on the
    device (50..120: no host time is trusted), busy 50 µs of it."""
    events = [
        span("user_annotation", "step", 90, 100),
        launch("cudaLaunchKernel", 100, 5, 1),
        gpu_op("kernel", "a", 50, 30, 1, 0, 7),
        launch("cudaLaunchKernel", 150, 5, 2),
        gpu_op("kernel", "b", 100, 20, 2, 0, 7),
    ]
    p = profile_of(tmp_path, events)
    assert p.trace.device_work is not None
    clock = p.trace.device_work.clock(0)
    assert clock is not None
    assert (clock.before_launch, clock.lead_ns) == (2, 50 * US)
    assert clock.disagree
    (note,) = [n for n in p.notes if n.kind == "clocks-disagree"]
    assert note.data == {"device": 0, "ops": 2, "lead_ns": 50 * US}
    assert "50.0 µs" in note.text
    (dev,) = p.trace.devices
    assert (dev.window_ns, dev.busy_in_window_ns) == (70 * US, 50 * US)
    (work,) = p.trace.device_work.steps
    assert (work.window, work.window_start_ns) == (DEVICE, work.first_ns)


def test_ops_inside_their_launch_call_are_not_called_skew(tmp_path: Path) -> None:
    """A graph launch call 0..50 whose kernels start at 5 and 20 (inside it), and a blocking
    copy whose memcpy ends with the call: agreeing clocks allow all three."""
    events = [
        span("user_annotation", "step", 0, 200),
        launch("cudaGraphLaunch", 0, 50, 1),
        gpu_op("kernel", "a", 5, 10, 1, 0, 7),
        gpu_op("kernel", "b", 20, 10, 1, 0, 7),
        launch("cudaMemcpy", 60, 30, 2),
        gpu_op("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 70, 15, 2, 0, 7),
    ]
    p = profile_of(tmp_path, events)
    assert p.trace.device_work is not None
    clock = p.trace.device_work.clock(0)
    assert clock is not None
    assert (clock.before_launch, clock.inside_launch) == (0, 3)
    assert "clocks-disagree" not in {n.kind for n in p.notes}


def test_a_device_idle_with_work_queued_is_named(tmp_path: Path) -> None:
    """Launched at 10..15, the kernel starts at 2,015 µs with nothing on the device before
    it: 2 ms idle with launched work waiting (not launch latency)."""
    events = [
        span("user_annotation", "step", 0, 100),
        launch("cudaLaunchKernel", 10, 5, 1),
        gpu_op("kernel", "a", 2015, 10, 1, 0, 7),
    ]
    p = profile_of(tmp_path, events)
    assert p.trace.device_work is not None
    clock = p.trace.device_work.clock(0)
    assert clock is not None and clock.queued_idle_ns == 2000 * US
    (note,) = [n for n in p.notes if n.kind == "queued-idle"]
    assert note.data == {"device": 0, "queued_idle_ns": 2000 * US}


def pipelined(steps: int) -> list[dict[str, Any]]:
    """ProfilerSteps of 100 µs at 100·n (µs); each launches one 80 µs kernel at its
    start + 10, which the device runs 60 µs after the launch: step n's kernel runs
    100n+70 .. 100n+150, into the next step's host span."""
    events: list[dict[str, Any]] = []
    for n in range(1, steps + 1):
        t = 100.0 * n
        events += [
            span("user_annotation", f"ProfilerStep#{n}", t, 100),
            launch("cudaLaunchKernel", t + 10, 5, n),
            gpu_op("kernel", "gemm", t + 70, 80, n, 0, 7),
        ]
    return events


def test_a_pipelined_loop_counts_no_device_time_twice(tmp_path: Path) -> None:
    """Windows tile the device timeline: step 1 from its host start (its work began inside
    it) to its kernel's end (100..250), step 2 from there to its own kernel's end
    (250..350), step 3 250..450 -> 350..450. Busy 240 of 350 µs; each step's breakdown
    wall is its own window and they add up to the device's window."""
    p = profile_of(tmp_path, pipelined(3))
    (dev,) = p.trace.devices
    assert (dev.window_ns, dev.busy_in_window_ns) == (350 * US, 240 * US)
    assert p.trace.breakdown is not None
    (note,) = [n for n in p.notes if n.kind == "device-window"]
    assert note.data == {"steps": 3, "after_ns": 50 * US}
    assert note.text.startswith("3 of 3 steps")
    t0 = p.trace.breakdown.steps[0].start_ns  # the reader's clock starts at the first event
    walls = [((r.start_ns - t0) // US, r.wall_ns // US) for r in p.trace.breakdown.steps]
    assert walls == [(0, 150), (150, 100), (250, 100)]
    assert sum(r.wall_ns for r in p.trace.breakdown.steps) == dev.window_ns
    assert sum(r.compute_ns for r in p.trace.breakdown.steps) == dev.busy_in_window_ns
    for r in p.trace.breakdown.steps:
        assert sum(ns for _, ns in r.parts()) == r.wall_ns


def test_a_trace_missing_most_launches_keeps_the_host_window(tmp_path: Path) -> None:
    """Three device ops, one with its launch in the trace (HTA's filtered trace_compare
    keeps 2 of 18): the step's work is not known, so the host span stays its window
    although the one known op ran after it."""
    events = [
        span("user_annotation", "step", 0, 100),
        launch("cudaLaunchKernel", 90, 5, 1),
        gpu_op("kernel", "a", 150, 10, 1, 0, 7),
        gpu_op("kernel", "b", 20, 10, 2, 0, 7),
        gpu_op("kernel", "c", 40, 10, 3, 0, 7),
    ]
    p = profile_of(tmp_path, events)
    (dev,) = p.trace.devices
    assert (dev.window_ns, dev.busy_in_window_ns) == (100 * US, 20 * US)
    assert p.trace.device_work is not None
    (work,) = p.trace.device_work.steps
    assert (work.window, work.ops, work.after_ns) == (HOST, 1, 60 * US)


def test_a_device_never_reads_idle_through_steps_that_ran_its_kernels(tmp_path: Path) -> None:
    """As above, but every op runs after the step (none inside its host span): the one
    known op's span is the window, so the device is not called idle."""
    events = [
        span("user_annotation", "step", 0, 100),
        launch("cudaLaunchKernel", 90, 5, 1),
        gpu_op("kernel", "a", 150, 10, 1, 0, 7),
        gpu_op("kernel", "b", 170, 10, 2, 0, 7),
        gpu_op("kernel", "c", 190, 10, 3, 0, 7),
    ]
    p = profile_of(tmp_path, events)
    (dev,) = p.trace.devices
    assert dev.utilization > 0
    assert (dev.window_ns, dev.busy_in_window_ns) == (10 * US, 10 * US)


def test_device_work_survives_a_save(tmp_path: Path) -> None:
    p = profile_of(tmp_path, graph_after_step())
    back = codec.profile_from_dict(codec.to_dict(p))
    assert back.trace.device_work == p.trace.device_work


def tracelens(path: Path) -> dict[str, float]:
    with path.open(newline="") as f:
        return {row["type"]: float(row["time ms"]) for row in csv.DictReader(f)}


def test_vllm_replay_is_busy_as_its_device_timeline_says() -> None:
    """The vLLM decode replay: the step's host span is 2.4 ms and its kernels run 6.4 to
    16.7 ms after it (HIP). Measured over its work's own span, the device timeline
    matches tracelens's to the µs: busy, idle, total, and the breakdown's compute."""
    folder = SERVING / "vllm_decode_full"
    p = analyze(folder / "graph_execution.json.gz").rank()
    theirs = tracelens(folder / "tracelens_report" / "gpu_timeline.csv")
    (dev,) = p.trace.devices
    assert dev.busy_in_window_ns / 1e6 == pytest.approx(theirs["busy_time"], abs=1e-3)
    assert dev.window_ns / 1e6 == pytest.approx(theirs["total_time"], abs=1e-3)
    assert dev.idle_ns / 1e6 == pytest.approx(theirs["idle_time"], abs=1e-3)
    assert dev.utilization > 0.99
    assert p.trace.breakdown is not None
    (row,) = p.trace.breakdown.steps
    assert row.compute_ns / 1e6 == pytest.approx(theirs["computation_time"], abs=1e-3)
    assert row.memcpy_ns / 1e6 == pytest.approx(theirs["exposed_memcpy_time"], abs=1e-3)


def test_sglang_replay_window_starts_with_its_host_step() -> None:
    """The SGLang decode replay: the step's first kernel starts 81 µs into its host span
    and its last ends 8.1 ms after it, so the window runs from the host step's start to
    the last kernel's end: tracelens's total (first kernel to last) plus those 81 µs,
    which count as idle. Busy time matches to the µs."""
    folder = SERVING / "sglang_decode"
    p = analyze(folder / "sglang_Qwen3-8B_decode.json.gz").rank()
    theirs = tracelens(folder / "tracelens_report" / "gpu_timeline.csv")
    (dev,) = p.trace.devices
    assert dev.busy_in_window_ns / 1e6 == pytest.approx(theirs["busy_time"], abs=1e-3)
    assert p.trace.steps is not None
    first_kernel_ns = p.trace.steps.steps[0].start_ns + 81_000
    lead_ms = 0.081
    assert dev.window_ns / 1e6 == pytest.approx(theirs["total_time"] + lead_ms, abs=2e-3)
    assert dev.idle_ns / 1e6 == pytest.approx(theirs["idle_time"] + lead_ms, abs=2e-3)
    assert p.trace.device_work is not None
    (work,) = p.trace.device_work.steps
    assert work.first_ns is not None
    assert abs(work.first_ns - first_kernel_ns) < 1_000
    assert dev.utilization == pytest.approx(0.0206, abs=0.001)
    # 75 ops start before their launch call returned (the graph's kernels, a blocking
    # copy), none before it began: negative launch delays, not clocks that disagree
    clock = p.trace.device_work.clock(dev.device)
    assert clock is not None and (clock.inside_launch, clock.before_launch) == (75, 0)
    kinds = {n.kind for n in p.notes}
    assert "negative-launch-delays" in kinds and "clocks-disagree" not in kinds
    assert "queued-idle" in kinds  # 463 ms under a blocking hipMemcpyWithStream
