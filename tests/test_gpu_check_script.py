"""scripts/gpu-check.sh on a machine without a GPU (issue 37, item 2): its own plumbing
runs, every GPU step is skipped with its reason, the report is written, exit 0; and
the pure pieces of its checks (the tolerance, the sleep calibration's fit, counting
synchronizes, the busy-time recomputation) on hand-made inputs."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def checks_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_checks", ROOT / "scripts" / "gpu_checks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_checks"] = module
    spec.loader.exec_module(module)
    return module


def run_script(tmp_path: Path, timeout: float = 300, **extra: str) -> Path:
    """gpu-check.sh with its report in ``tmp_path/report``; it must exit 0."""
    out = tmp_path / "report"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "WHEELS": str(tmp_path),
           **extra}  # fmt: skip
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is for machines without CUDA")
def test_the_dry_run_skips_every_gpu_step_and_writes_the_report(tmp_path: Path) -> None:
    out = run_script(tmp_path)
    doc = json.loads((out / "gpu-report.json").read_text())
    assert doc["schema"] == "layerprof.gpu-check/1" and doc["failed"] == []
    assert len(doc["checks"]) == len(gc_budgets()) == 10
    for check in doc["checks"]:
        assert check["status"] == "skip" and check["reason"] == "no CUDA device", check
    assert doc["pytest"]["exit_code"] == 0 and "skipped" in doc["pytest"]["summary"]
    assert doc["complete"] is True
    assert [c["budget_s"] for c in doc["checks"]] == list(gc_budgets().values())
    text = (out / "gpu-report.txt").read_text()
    assert text.count("SKIP ") == 10 and (out / "cuda-tests.xml").exists()


def gc_budgets() -> dict[str, float]:
    return dict(checks_module().BUDGETS)


def test_the_pytest_step_can_be_left_out(tmp_path: Path) -> None:
    out = run_script(tmp_path, 120, GPU_CHECK_SKIP_PYTEST="1", GPU_CHECK_ONLY="environment,memory")
    doc = json.loads((out / "gpu-report.json").read_text())
    assert [c["name"] for c in doc["checks"]] == ["environment", "memory per layer"]
    assert "GPU_CHECK_SKIP_PYTEST" in doc["pytest"]["summary"]
    assert not (out / "cuda-tests.xml").exists()


def test_the_tolerance_is_three_percent_and_five_microseconds() -> None:
    gc = checks_module()
    assert gc.within(1_035_000, 1_000_000)  # 35 µs off: 30 µs + 5 µs allowed
    assert not gc.within(1_035_001, 1_000_000)
    assert gc.within(10_000, 5_000) and not gc.within(10_200, 5_000)  # 5 µs dominates


def test_the_sleep_calibration_fits_a_line() -> None:
    gc = checks_module()
    a, b = gc.fit_line([100.0, 200.0, 400.0], [1_500.0, 2_500.0, 4_500.0])
    assert a == pytest.approx(10.0) and b == pytest.approx(500.0)
    with pytest.raises(ValueError):
        gc.fit_line([1.0], [2.0])


def test_syncs_are_counted_and_busy_time_is_a_union() -> None:
    gc = checks_module()
    trace = {"traceEvents": [
        {"ph": "X", "name": "cudaDeviceSynchronize", "ts": 0, "dur": 1},
        {"ph": "X", "name": "cudaStreamSynchronize", "ts": 5, "dur": 1},
        {"ph": "X", "name": "cudaLaunchKernel", "ts": 6, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "k1", "ts": 10, "dur": 10},
        {"ph": "X", "cat": "kernel", "name": "k2", "ts": 15, "dur": 10},  # overlaps k1
        {"ph": "X", "cat": "gpu_memcpy", "name": "m", "ts": 30, "dur": 5},
        {"ph": "X", "cat": "gpu_memset", "name": "s", "ts": 38, "dur": 10},  # cut at 40
    ]}  # fmt: skip
    assert gc.count_syncs(trace) == 2
    assert gc.busy_union_ns(trace, 0.0, 40.0) == pytest.approx((15 + 5 + 2) * 1000)


def test_kernels_repeat_per_forward_and_their_medians_are_per_layer() -> None:
    gc = checks_module()
    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "at::cuda::spin_kernel(long)", "ts": t, "dur": d}
        for t, d in [(0, 100), (200, 200), (500, 101), (700, 204), (1000, 99), (1200, 199)]
    ] + [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 150, "dur": 5}]}  # fmt: skip
    spins = gc.kernel_durations_ns(trace, "spin_kernel")
    assert spins == [100_000, 200_000, 101_000, 204_000, 99_000, 199_000]
    assert gc.per_position_medians(spins, 2) == [100_000, 200_000]
    assert gc.sum_ns(trace, "kernel") == pytest.approx(sum(spins) + 5_000)
    with pytest.raises(ValueError):
        gc.per_position_medians(spins, 4)  # not whole forwards: a kernel went missing


def test_a_crooked_calibration_shows_in_its_residual() -> None:
    gc = checks_module()
    xs = [50_000.0, 200_000.0, 800_000.0, 1_600_000.0]
    ys = [0.7 * x + 6_000 for x in xs]
    a, b = gc.fit_line(xs, ys)
    assert gc.worst_residual(xs, ys, a, b) == pytest.approx(0.0, abs=1e-12)
    ys[0] += 10_000  # a cold first launch
    a, b = gc.fit_line(xs, ys)
    assert gc.worst_residual(xs, ys, a, b) > gc.LINEAR_TOL
    ys = [0.7 * x + 6_000 for x in xs]
    ys[0] += 700  # the events' jitter on the shortest point: 1.7 % of it, no crookedness
    a, b = gc.fit_line(xs, ys)
    assert gc.worst_residual(xs, ys, a, b) == 0.0


def test_memory_tolerance_is_five_percent_and_64_kib() -> None:
    gc = checks_module()
    ref = 4 << 20  # 5 % is 209_715.2 B, 64 KiB 65_536 B
    assert gc.bytes_close(ref + 275_251, ref) and gc.bytes_close(ref - 275_251, ref)
    assert not gc.bytes_close(ref + 275_252, ref) and not gc.bytes_close(ref - 275_252, ref)


class Row:
    def __init__(self, path: str, parent: str | None, self_ns: float, dev: float | None) -> None:
        self.path, self.parent, self.self_ns, self.device_self_ns = path, parent, self_ns, dev


def test_device_over_host_counts_the_leaf_layers() -> None:
    gc = checks_module()
    rows = [Row("", None, 5, 10), Row("a", "", 1, 1000), Row("a.0", "a", 10, 100),
            Row("b", "", 10, 400)]  # fmt: skip
    assert gc.leaf_paths(rows) == ["a.0", "b"]
    assert gc.device_host_ratio(rows) == pytest.approx(500 / 20)
    assert gc.device_host_ratio([Row("", None, 1, None), Row("a", "", 1, None)]) is None


def test_a_check_that_raises_or_overruns_fails_alone(tmp_path: Path) -> None:
    gc = checks_module()

    def broken(out: Path) -> object:
        raise RuntimeError("CUDA error: an illegal memory access")

    def slow(out: Path) -> object:
        time.sleep(5)
        return gc.Check("slow", "pass")

    def fine(out: Path) -> object:
        return gc.Check("fine", "pass", "ok", {"x": 1})

    seen: list[int] = []
    t0 = time.monotonic()
    results = gc.run_all(
        tmp_path, {"broken": broken, "slow": slow, "fine": fine},
        {"broken": 5, "slow": 0.2, "fine": 5}, after=lambda done: seen.append(len(done)),
    )  # fmt: skip
    assert time.monotonic() - t0 < 3
    assert [(r.name, r.status) for r in results] == [
        ("broken", "fail"), ("slow", "fail"), ("fine", "pass")]  # fmt: skip
    assert results[0].reason == "RuntimeError: CUDA error: an illegal memory access"
    assert "budget of 0.2 s" in results[1].reason and seen == [1, 2, 3]
    gc.write_report(tmp_path, results[:2], None, "", complete=False)
    doc = json.loads((tmp_path / "gpu-report.json").read_text())
    assert doc["complete"] is False and doc["failed"] == ["broken", "slow"]
    assert "INCOMPLETE" in (tmp_path / "gpu-report.txt").read_text()


def test_the_graph_replay_verdict_on_pairs_made_from_code(tmp_path: Path) -> None:
    """The live graph pair's verdict (item 5 of issue 44), on a capture and replays
    made from code: the same layers pass, a layer off by 50 % or a replay whose kernel
    time is mostly off the layers fails, naming why."""
    from dataclasses import replace

    from layerprof.pivot.records import LayerSamples
    from layerprof.trace.capturepair import CaptureInput, analyze_pair
    from tests.support.graph_traces import capture_events, replay_events, write_trace

    gc = checks_module()
    capture = [CaptureInput(str(write_trace(tmp_path / "c.json.gz", capture_events())))]
    merged = analyze_pair(write_trace(tmp_path / "r.json.gz", replay_events()), capture).rank()
    assert gc.graph_verdict("g", merged, merged).status == "pass"
    leaf = "Decoder.Layer[1].MLP"
    s = merged.samples[leaf]
    slower = LayerSamples(s.total_ns, s.self_ns, s.calls, device_total_ns=[150_000],
                          device_self_ns=[150_000])  # fmt: skip
    eager = replace(merged, samples={**merged.samples, leaf: slower})
    verdict = gc.graph_verdict("g", merged, eager)
    assert verdict.status == "fail" and f"{leaf} -33.3 % vs eager" in verdict.reason
    stray = replay_events(extra="stray")
    stray = [{**e, "dur": 10_000.0} if e.get("name") == "stray" else e for e in stray]
    off = analyze_pair(write_trace(tmp_path / "s.json.gz", stray), capture).rank()
    verdict = gc.graph_verdict("g", off, merged)
    assert verdict.status == "fail" and "kernel time on layers (< 95 %)" in verdict.reason
