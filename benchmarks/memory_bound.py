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
* ``per sample and quantity``: ``kept`` / 2 (total, self).

    python benchmarks/memory_bound.py [--layers 200] [--iters 400 2000]
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=200)
    ap.add_argument("--iters", type=int, nargs=2, default=(400, 2000))
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


if __name__ == "__main__":
    main()
