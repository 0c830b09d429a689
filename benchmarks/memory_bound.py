"""Memory a hooked run keeps per layer and iteration (the bound the README states).

Runs ``layerprof.profile`` (the ``layerprof run`` path, hooks mode) on a
model of ``--layers`` empty layers for two iteration counts under
``tracemalloc`` (which sees Python objects and numpy arrays alike) and
prints, per layer and iteration (the slope between the two runs, so fixed
costs drop out):

* ``peak``: the most memory the run held at once (recording, then reducing
  the record to per-layer samples);
* ``kept``: what the finished Profile holds (int64 samples of total and self
  time per layer and iteration, and their summaries);
* ``per sample and quantity``: ``kept`` / 2 (total, self);
* ``layerprof run``: the whole command's peak resident memory (its own
  ``ru_maxrss``, which sees what tracemalloc does not: the allocator's high
  water mark, torch's own buffers), the slope between two iteration counts
  over ``--run-layers`` layers (target: <= 16 bytes per layer and iteration).

    python benchmarks/memory_bound.py [--layers 200] [--iters 400 2000]
        [--run-layers 1000] [--run-iters 200 2200]
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import torch
from torch import nn

import layerprof


class Empty(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def measure(layers: int, iters: int) -> tuple[int, int]:
    """(peak bytes during the run, bytes the Profile keeps) above the starting point."""
    model = nn.Sequential(*(Empty() for _ in range(layers)))
    x = torch.zeros(1)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    prof = layerprof.profile(model, x, warmup=0, iters=iters)
    for root in prof.tree():  # summaries are computed (and cached) on first use
        root.self_check(tolerance_ns=float("inf"))
    gc.collect()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(prof.samples) == layers + 1
    return peak - base, kept - base


MODEL_FILE = """
from torch import nn


class Empty(nn.Module):
    def forward(self, x):
        return x


def model(layers: int) -> nn.Module:
    return nn.Sequential(*(Empty() for _ in range(layers)))
"""

# The whole `layerprof run` in a child that reports its own peak resident memory.
RUN_SNIPPET = """
import resource, sys
from layerprof.cli import main
code = main(sys.argv[1:])
print("MAXRSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, code)
"""


def run_peak_rss(layers: int, iters: int, workdir: Path) -> int:
    """Peak RSS (bytes) of a whole `layerprof run` of ``layers`` empty layers."""
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{workdir}"}
    args = ["run", "--arch", "empties:model", "--arch-kwargs", f'{{"layers": {layers}}}',
            "--input", "1", "--warmup", "0", "--iters", str(iters), "--threads", "1"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", RUN_SNIPPET, *args],
        capture_output=True, text=True, check=True, cwd=workdir, env=env,
    )  # fmt: skip
    kib = int(done.stdout.rpartition("MAXRSS ")[2].split()[0])
    return kib * 1024  # Linux reports KiB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=200)
    ap.add_argument("--iters", type=int, nargs=2, default=(400, 2000))
    ap.add_argument("--run-layers", type=int, default=1000)
    ap.add_argument("--run-iters", type=int, nargs=2, default=(200, 2200))
    a = ap.parse_args()
    torch.set_num_threads(1)
    n1, n2 = a.iters
    measure(a.layers, n1)  # lazy imports and one-time caches land here, not in the slope
    p1, k1 = measure(a.layers, n1)
    p2, k2 = measure(a.layers, n2)
    cells = (a.layers + 1) * (n2 - n1)
    print(
        f"memory_bound: {a.layers + 1} layers (one call each per forward),"
        f" {n1} vs {n2} iterations, layerprof.profile (hooks mode)"
    )
    print(f"  peak during the run: {(p2 - p1) / cells:6.1f} bytes per layer per iteration")
    print(f"  kept by the Profile: {(k2 - k1) / cells:6.1f} bytes per layer per iteration")
    print(f"  kept per sample and quantity (total, self): {(k2 - k1) / cells / 2:5.1f} bytes")
    print(
        f"  at {n2} iterations: peak {p2 / 2**20:.1f} MiB, kept {k2 / 2**20:.1f} MiB"
        " (target: peak <= 16 bytes per layer and iteration)"
    )

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "empties.py").write_text(MODEL_FILE)
        r1, r2 = a.run_iters
        rounds = [(run_peak_rss(a.run_layers, r1, work), run_peak_rss(a.run_layers, r2, work))
                  for _ in range(2)]  # fmt: skip
    small, large = min(r[0] for r in rounds), min(r[1] for r in rounds)
    per_cell = (large - small) / ((a.run_layers + 1) * (r2 - r1))
    print(
        f"  layerprof run, whole process: {a.run_layers + 1} layers, {r1} vs {r2} iterations:"
        f" peak RSS {small / 2**20:.0f} -> {large / 2**20:.0f} MiB, {per_cell:.1f} bytes per"
        " layer per iteration (target <= 16; the lower of 2 runs each)"
    )


if __name__ == "__main__":
    main()
