"""A finished command ends its process (issue 43, item 17).

A finished ``layerprof run`` once waited forever at exit: numpy's OpenBLAS, shutting
its pool down in the C library's exit handlers, joined a thread parked in torch's
OpenMP (libgomp) barrier. The command now ends with ``os._exit`` once its files are
in place and its streams flushed, so no runtime's exit handler can hold it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import ROOT

_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
FAST = ["--warmup", "1", "--iters", "3"]

# Stands in for a runtime whose exit handler deadlocks: it waits for ever at exit.
_HANGS_AT_EXIT = """
import atexit, threading
from torch import nn

def build():
    atexit.register(threading.Event().wait)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
"""

# Both pools busy, as in the BERT-like run that hung: numpy's OpenBLAS threads started by
# a matrix product, torch's OpenMP threads by the encoder's forward.
_TWO_POOLS = """
import numpy as np
from torch import nn

def build():
    a = np.ones((512, 512))
    (a @ a).sum()
    layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True)
    return nn.TransformerEncoder(layer, 2).eval()
"""


def _start(folder: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "layerprof", *argv], cwd=folder, env=_ENV, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def test_a_finished_run_is_not_held_by_an_exit_handler(tmp_path: Path) -> None:
    (tmp_path / "hangs_at_exit.py").write_text(_HANGS_AT_EXIT)
    run = _start(
        tmp_path, "run", "--arch", "hangs_at_exit:build", "--input", "2x4", *FAST, "--json",
        "p.json", "--csv", "-",
    )  # fmt: skip
    try:
        out, err = run.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        run.kill()
        run.communicate()
        pytest.fail("layerprof run finished its work but its process did not end")
    assert run.returncode == 0, err
    assert (tmp_path / "p.json").stat().st_size > 0
    assert out.splitlines()[0].startswith("path,") and len(out.splitlines()) > 3  # flushed
    assert "wrote p.json" in err


def test_a_command_without_torch_exits_as_usual(tmp_path: Path) -> None:
    """analyze never loads torch: its exit handlers (a worker pool's) still run."""
    from tests.support.rank_traces import cpu_trace

    trace = cpu_trace(tmp_path / "t.json")
    done = subprocess.run(
        [sys.executable, "-c", "import atexit; atexit.register(print, 'handlers ran');"
         "from layerprof.cli import entry; entry()", "analyze", str(trace), "-q"],
        cwd=tmp_path, env=_ENV, text=True, capture_output=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "handlers ran\n"


@pytest.mark.slow
def test_many_runs_under_load_all_exit(tmp_path: Path) -> None:
    """16 runs of an encoder with both thread pools started, four at a time on top of
    each other (the load the hang was seen under): each must end, with exit 0, within
    a bound far above its work (a hung one never ends)."""
    (tmp_path / "two_pools.py").write_text(_TWO_POOLS)
    argv = ["run", "--arch", "two_pools:build", "--input", "4x16x64", *FAST, "-q"]
    bound_s = 300.0
    waiting = list(range(16))
    running: dict[int, tuple[subprocess.Popen[str], float]] = {}
    failed: list[str] = []
    while waiting or running:
        while waiting and len(running) < 4:
            i = waiting.pop()
            out = f"p{i}.json"
            running[i] = (_start(tmp_path, *argv, "--json", out), time.monotonic())
        time.sleep(0.2)
        for i, (process, started) in list(running.items()):
            if process.poll() is not None:
                del running[i]
                if process.returncode != 0:
                    _, err = process.communicate()
                    failed.append(f"run {i}: exit {process.returncode}: {err}")
            elif time.monotonic() - started > bound_s:
                process.kill()
                process.wait()
                del running[i]
                failed.append(f"run {i}: still running after {bound_s:.0f} s")
    assert not failed, failed
    assert len(list(tmp_path.glob("p*.json"))) == 16
