"""What counting activation memory costs: the extra step of ``run --backward``.

    python benchmarks/activation_memory.py [--rounds 9] [--threads 1]

Per model, one bare training step (forward, loss, backward; grads set to None) and the
counted step (``measure_step``: the same step under ``ActivationCapture``'s forward
hooks and saved-tensor pack hook, plus reading parameters and gradients), in rounds
that interleave the two; medians over the rounds (never a timed assert). "ratio" is
counted / bare: what the one extra step of ``run --backward`` costs, in bare steps.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from layerprof.capture.memory.activations import measure_step
from layerprof.load.demo import build
from layerprof.stats import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test models (tests/)


def models() -> dict[str, tuple[nn.Module, tuple[Any, ...]]]:
    from tests.support.flop_models import ResNetStage, gpt_block

    return {
        "demo cnn (8x3x32x32)": (build("cnn"), (torch.randn(8, 3, 32, 32),)),
        "GPT-2 block (8x128x256)": (gpt_block(256, 8), (torch.randn(8, 128, 256),)),
        "ResNet stage (8x64x56x56)": (ResNetStage(64, 128), (torch.randn(8, 64, 56, 56),)),
        "MLP 20x Linear(64) (32x64)": (
            nn.Sequential(*(nn.Sequential(nn.Linear(64, 64), nn.GELU()) for _ in range(20))),
            (torch.randn(32, 64),),
        ),
    }


def seconds(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def ratios(model: nn.Module, args: tuple[Any, ...], rounds: int) -> tuple[float, float, float]:
    """(median bare step s, median counted step s, median of the per-round ratios)."""
    params = list(model.parameters())

    def bare() -> None:
        for p in params:
            p.grad = None
        model(*args).float().sum().backward()

    def counted() -> None:
        measure_step(model, args, {})

    bare()
    counted()  # warm both paths
    b, c, r = [], [], []
    for i in range(rounds):
        pair = (bare, counted) if i % 2 == 0 else (counted, bare)
        t = {fn: seconds(fn) for fn in pair}
        b.append(t[bare])
        c.append(t[counted])
        r.append(t[counted] / t[bare])
    return median(b), median(c), median(r)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"counted step / bare training step, {args.threads} thread(s), medians")
    print(f"{'model':30} {'bare':>10} {'counted':>10} {'ratio':>6}")
    for name, (model, inputs) in models().items():
        bare, counted, ratio = ratios(model.train(), inputs, args.rounds)
        print(f"{name:30} {bare * 1e3:8.2f}ms {counted * 1e3:8.2f}ms {ratio:5.2f}x")


if __name__ == "__main__":
    main()
