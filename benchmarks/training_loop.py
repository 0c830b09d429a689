"""What recording a training loop costs: ``Recorder(model, backward=True)`` against the
bare loop, side by side in one process.

A small CNN (two conv blocks with batch norm and in-place ReLUs, a pool, a
linear head), batch 8 of 3x32x32, SGD, 1 thread. Each round runs ``--steps``
training steps of the bare loop, then of the recorded loop (forward,
backward, optimizer and ``rec.step()``), alternating which goes first, so both
see the same machine load; a variant's time per step is the median of the
round's steps after the first (the first recorded forward records shapes).
Printed: the median over rounds of (recorded / bare), with the lowest and
highest round as the noise, for wall time and for thread CPU time (which does
not count the time other processes held the core). Target: <= 1.3x.

    python benchmarks/training_loop.py [--steps 20] [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from layerprof import Recorder


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )  # fmt: skip


def timed_steps(step: Callable[[], None], steps: int) -> tuple[float, float]:
    """Median (wall, thread CPU) ns per step, the first step left out."""
    wall, cpu = [], []
    for _ in range(steps):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        step()
        wall.append(time.perf_counter_ns() - t0)
        cpu.append(time.thread_time_ns() - c0)
    return statistics.median(wall[1:]), statistics.median(cpu[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))

    def train_step() -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    def recorded() -> tuple[float, float]:
        rec = Recorder(model, backward=True)
        with rec:

            def step() -> None:
                train_step()
                rec.step()

            out = timed_steps(step, args.steps)
        rec.profile()  # after the timing: what the user pays once, at the end
        return out

    for _ in range(3):
        train_step()
    wall_ratios, cpu_ratios, bare_ms = [], [], []
    for r in range(args.rounds):
        first_bare = r % 2 == 0
        if first_bare:
            bare = timed_steps(train_step, args.steps)
            rec = recorded()
        else:
            rec = recorded()
            bare = timed_steps(train_step, args.steps)
        wall_ratios.append(rec[0] / bare[0])
        cpu_ratios.append(rec[1] / bare[1])
        bare_ms.append(bare[0] / 1e6)
    print(f"small CNN training step, batch 8, 1 thread: bare {statistics.median(bare_ms):.2f} ms")
    for name, ratios in (("wall", wall_ratios), ("thread CPU", cpu_ratios)):
        print(
            f"  Recorder(backward=True) / bare ({name}): {statistics.median(ratios):.3f}x"
            f"  (rounds {min(ratios):.3f}x - {max(ratios):.3f}x, n={len(ratios)})"
        )


if __name__ == "__main__":
    main()
