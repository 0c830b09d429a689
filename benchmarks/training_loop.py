"""What recording a training loop costs: ``Recorder(model, backward=True)`` against the
bare loop, side by side in one process.

Three loops, each its own model and SGD, 1 thread:

* ``cnn``: a small CNN (two conv blocks with batch norm and in-place ReLUs, a pool, a
  linear head), batch 8 of 3x32x32;
* ``compiled``: a 4-layer MLP under ``torch.compile`` (inductor), batch 64 (compiled
  before the rounds start);
* ``checkpointed``: a GPT-2-like stack of 4 pre-norm blocks (attention and MLP, width
  128, sequence 64, batch 4), each block under ``torch.utils.checkpoint``
  (non-reentrant), as Hugging Face's ``gradient_checkpointing_enable()`` runs them.

Each round runs ``--steps`` training steps of the bare loop, then of the recorded loop
(forward, backward, optimizer and ``rec.step()``), alternating which goes first, so
both see the same machine load; a variant's time per step is the median of the
round's steps after the first (the first recorded forward records shapes). Printed
per loop: the median over rounds of (recorded / bare), with the lowest and highest
round as the noise, for wall time and for thread CPU time (which does not count the
time other processes held the core). Target: <= 1.2x.

    python benchmarks/training_loop.py [--steps 20] [--rounds 9] [--loops cnn,compiled,checkpointed]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

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


class Block(nn.Module):
    """A GPT-2-like pre-norm block: self-attention and a 4x MLP, residuals."""

    def __init__(self, dim: int = 128, heads: int = 4) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        out: torch.Tensor = x + self.mlp(self.ln_2(x))
        return out


class Checkpointed(nn.Module):
    def __init__(self, depth: int = 4) -> None:
        super().__init__()
        self.h = nn.ModuleList(Block() for _ in range(depth))
        self.head = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.h:
            x = checkpoint(block, x, use_reentrant=False)
        out: torch.Tensor = self.head(x).mean(1)
        return out


def loop(name: str) -> tuple[nn.Module, nn.Module, torch.Tensor, torch.Tensor]:
    """(the model to record, what the loop calls, inputs, labels)."""
    torch.manual_seed(0)
    if name == "cnn":
        model = small_cnn()
        return model, model, torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    if name == "compiled":
        model = nn.Sequential(
            nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(),
            nn.Linear(512, 256), nn.GELU(), nn.Linear(256, 10),
        )  # fmt: skip
        return model, torch.compile(model), torch.randn(64, 256), torch.randint(0, 10, (64,))
    model = Checkpointed()
    return model, model, torch.randn(4, 64, 128, requires_grad=True), torch.randint(0, 10, (4,))


def measure(name: str, steps: int, rounds: int) -> None:
    model, called, x, y = loop(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train_step() -> None:
        loss = nn.functional.cross_entropy(called(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    def recorded() -> tuple[float, float]:
        rec = Recorder(called, backward=True)
        with rec:

            def step() -> None:
                train_step()
                rec.step()

            out = timed_steps(step, steps)
        rec.profile()  # after the timing: what the user pays once, at the end
        return out

    for _ in range(3):  # warm-up (and the compile)
        train_step()
    wall_ratios, cpu_ratios, bare_ms = [], [], []
    for r in range(rounds):
        if r % 2 == 0:
            bare = timed_steps(train_step, steps)
            rec = recorded()
        else:
            rec = recorded()
            bare = timed_steps(train_step, steps)
        wall_ratios.append(rec[0] / bare[0])
        cpu_ratios.append(rec[1] / bare[1])
        bare_ms.append(bare[0] / 1e6)
    print(f"{name} training step, 1 thread: bare {statistics.median(bare_ms):.2f} ms")
    for what, ratios in (("wall", wall_ratios), ("thread CPU", cpu_ratios)):
        print(
            f"  Recorder(backward=True) / bare ({what}): {statistics.median(ratios):.3f}x"
            f"  (rounds {min(ratios):.3f}x - {max(ratios):.3f}x, n={len(ratios)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--loops", default="cnn,compiled,checkpointed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.loops.split(","):
        measure(name, args.steps, args.rounds)


if __name__ == "__main__":
    main()
