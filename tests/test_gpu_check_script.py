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


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is for machines without CUDA")
def test_the_dry_run_skips_every_gpu_step_and_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "report"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "WHEELS": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((out / "gpu-report.json").read_text())
    assert doc["schema"] == "layerprof.gpu-check/1" and doc["failed"] == []
    assert len(doc["checks"]) == 9
    for check in doc["checks"]:
        assert check["status"] == "skip" and check["reason"] == "no CUDA device", check
    assert doc["pytest"]["exit_code"] == 0 and "skipped" in doc["pytest"]["summary"]
    text = (out / "gpu-report.txt").read_text()
    assert text.count("SKIP ") == 9 and (out / "cuda-tests.xml").exists()


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
