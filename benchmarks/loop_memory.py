"""Memory a training-loop Recorder keeps per module and step (issue: a long run stays bounded).

Runs ``Recorder(backward=True)`` over a training loop of ``--layers`` Linear
layers for two step counts under ``tracemalloc`` (Python objects and numpy
arrays alike) and prints, per module and recorded step (the slope between the
two runs, so fixed costs drop out):

* ``while recording``: what the Recorder holds just before ``profile()``;
* ``peak``: the most held at once, ``profile()`` included;
* ``kept``: what the finished Profile holds;
* ``outside the window``: the same slope for steps the schedule skips and
  warms up over (the target is nothing).

    python benchmarks/loop_memory.py [--layers 50] [--steps 400 2000]
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

import torch
from torch import nn

from layerprof import Recorder, StepSchedule


def measure(
    layers: int, steps: int, *, skip: int = 0, counted: bool = False
) -> tuple[int, int, int, int]:
    """(held before profile(), peak, kept by the Profile, the samples' own bytes) in
    bytes above the start (the samples: every layer's forward and backward total and
    self per step, as stored);
    ``counted``: the schedule says how many steps are active (the callbacks' default
    does), else it records every step (``StepSchedule()``)."""
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(layers)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(2, 4)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    schedule = StepSchedule(skip=skip, active=steps if counted else None)
    with Recorder(model, backward=True, schedule=schedule, correct=False) as rec:
        for _ in range(steps + skip):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            rec.step()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    prof = rec.profile()
    del rec
    gc.collect()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert prof.loop is not None and len(prof.loop.steps) == steps
    samples = 0
    for layer in prof.samples.values():
        for series in (layer.total_ns, layer.self_ns, layer.backward_total_ns,
                       layer.backward_self_ns):  # fmt: skip
            samples += 0 if series is None else series.stored.nbytes
    return held - base, peak - base, kept - base, samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--steps", type=int, nargs=2, default=(400, 2000))
    a = ap.parse_args()
    torch.set_num_threads(1)
    n1, n2 = a.steps
    modules = a.layers + 1
    measure(a.layers, n1)  # lazy imports and one-time caches land here, not in the slope
    cells = modules * (n2 - n1)
    print(
        f"loop_memory: {modules} modules, {n1} vs {n2} recorded steps,"
        " Recorder(backward=True), one forward and backward per step"
    )
    for counted, what in ((False, "StepSchedule() (every step)"),
                          (True, "StepSchedule(active=N) (a known count)")):  # fmt: skip
        h1, p1, k1, s1 = measure(a.layers, n1, counted=counted)
        h2, p2, k2, s2 = measure(a.layers, n2, counted=counted)
        print(f"  {what}:")
        print(f"    the samples:          {(s2 - s1) / cells:7.1f} bytes per module per step")
        print(f"    held while recording: {(h2 - h1) / cells:7.1f} bytes per module per step")
        print(f"    peak (profile() too): {(p2 - p1) / cells:7.1f} bytes per module per step")
        print(f"    kept by the Profile:  {(k2 - k1) / cells:7.1f} bytes per module per step")
    o1 = measure(a.layers, 10, skip=n1)[0]
    o2 = measure(a.layers, 10, skip=n2)[0]
    print(
        f"  steps outside the window (skipped): {(o2 - o1) / cells:7.1f} bytes per module per step"
    )
    print(
        "  (target: the samples <= 16 bytes per module per recorded step at the peak, nothing"
        " copies them at profile(); 0 outside the window. Held, peak and kept add each step's"
        " row and, at the peak, the chunk being summed: per step, not per module)"
    )


if __name__ == "__main__":
    main()
