"""What FLOP counting costs, and whether ``layerprof sweep`` measures what separate runs do.

    python benchmarks/flops_cost.py [--rounds 7] [--threads 1] [--part count|sweep|all]

Prints ratios from rounds that interleave the variants (never a timed assert;
medians over the rounds, so one disturbed round does not decide):

* ``count``: per model, the counting forward (``count_flops``: dispatch mode,
  op timing, formulas, bytes) and torch's own ``FlopCounterMode`` forward, each
  over a plain forward of the same round. "adds" is the counting pass's extra
  time in forwards (count / forward - 1): the target is <= 1.
* ``sweep``: the median latency of each point of a ``run_sweep`` grid over the
  median latency of a separate ``run_model`` with the same batch, dtype and
  threads, next to the same ratio between two separate runs (the noise floor).
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

from layerprof.capture.flops.counter import count_flops
from layerprof.capture.options import RunOptions
from layerprof.capture.runner import run_model
from layerprof.capture.sweep import SweepOptions, run_sweep
from layerprof.load.demo import build
from layerprof.load.inputs import build_inputs
from layerprof.stats import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test models (tests/)


def models() -> dict[str, tuple[nn.Module, tuple[Any, ...]]]:
    from tests.support.flop_models import MhaNet, ResNetStage, RnnNet, SdpaNet, gpt_block

    return {
        "demo cnn (8x3x32x32)": (build("cnn"), (torch.randn(8, 3, 32, 32),)),
        "demo transformer (8x64 ids)": (build("transformer"), (torch.randint(0, 1000, (8, 64)),)),
        "GPT-2 block (8x128x256)": (gpt_block(256, 8), (torch.randn(8, 128, 256),)),
        "SDPA net (8x128x256)": (SdpaNet(256, 8, True), (torch.randn(8, 128, 256),)),
        "MHA fast path (8x128x256)": (MhaNet(256, 8), (torch.randn(8, 128, 256),)),
        "LSTM 2x bidir (16x64x128)": (RnnNet("LSTM", 128, 256, 2, True), (torch.randn(16, 64, 128),)),
        "ResNet stage (8x64x56x56)": (ResNetStage(64, 128), (torch.randn(8, 64, 56, 56),)),
        "GPT-2 block, tiny (2x16x32)": (gpt_block(32, 4), (torch.randn(2, 16, 32),)),
    }  # fmt: skip


def seconds(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def count_cost(rounds: int) -> None:
    print("counting forward / plain forward (median over interleaved rounds)")
    print(f"{'model':32} {'forward':>10} {'layerprof':>10} {'adds':>6} {'torch':>7}")
    for name, (model, args) in models().items():
        fwd, ours, theirs = _count_ratios(model.eval(), args, rounds)
        print(f"{name:32} {fwd * 1e3:8.2f}ms {ours:9.2f}x {ours - 1:5.2f} {theirs:6.2f}x")


def _count_ratios(model: nn.Module, args: tuple[Any, ...], rounds: int) -> tuple[float, ...]:
    """(median forward seconds, ours / forward, torch's FlopCounterMode / forward)."""
    from torch.utils.flop_counter import FlopCounterMode

    def plain() -> None:
        model(*args)

    def counted() -> None:
        count_flops(model, plain)

    def torchs() -> None:
        with FlopCounterMode(display=False):
            plain()

    with torch.inference_mode():
        for fn in (plain, counted, torchs):  # warm-up: first calls, lazy init
            fn()
        times: dict[str, list[float]] = {"plain": [], "ours": [], "torch": []}
        for _ in range(rounds):
            times["plain"].append(seconds(plain))
            times["ours"].append(seconds(counted))
            times["torch"].append(seconds(torchs))
    ours = median([o / p for o, p in zip(times["ours"], times["plain"], strict=True)])
    theirs = median([t / p for t, p in zip(times["torch"], times["plain"], strict=True)])
    return median(times["plain"]), ours, theirs


def sweep_agreement(rounds: int, threads: int) -> None:
    from tests.support.real_models import ResNetish

    model = ResNetish().eval()
    batches, iters = (1, 8, 32), 15
    print(
        f"\nsweep vs separate runs: ResNetish, batches {batches}, {threads} thread(s), {iters} iters"
    )
    opts = SweepOptions(batches=batches, threads=(threads,), warmup=3, iters=iters, memory=False)
    ratios: dict[int, list[float]] = {b: [] for b in batches}
    noise: dict[int, list[float]] = {b: [] for b in batches}
    for r in range(rounds):
        # alternate which goes first, so that drift within a round cancels out
        early = {b: separate(model, b, threads, iters) for b in batches} if r % 2 else {}
        sweep = run_sweep(model, ["1x3x32x32"], opts)
        late = {b: separate(model, b, threads, iters) for b in batches}
        if not early:
            early = {b: separate(model, b, threads, iters) for b in batches}
        for point in sweep.points:
            assert point.batch is not None and point.latency is not None
            ratios[point.batch].append(point.latency.median / early[point.batch])
            noise[point.batch].append(late[point.batch] / early[point.batch])
    print(
        f"{'batch':>6} {'sweep / run: median [min, max]':>32} {'run / run: median [min, max]':>32}"
    )
    for b in batches:
        print(f"{b:6} {_spread(ratios[b]):>32} {_spread(noise[b]):>32}")


def _spread(values: list[float]) -> str:
    return f"{median(values):.3f}x [{min(values):.2f}, {max(values):.2f}]"


def separate(model: nn.Module, batch: int, threads: int, iters: int) -> float:
    inputs = build_inputs([f"{batch}x3x32x32"])
    options = RunOptions(warmup=3, iters=iters, threads=threads)
    profile = run_model(model, tuple(inputs.args), {}, options)
    assert profile.latency is not None
    return profile.latency.median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--part", choices=("count", "sweep", "all"), default="all")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.part in ("count", "all"):
        count_cost(args.rounds)
    if args.part in ("sweep", "all"):
        sweep_agreement(max(args.rounds // 2, 2), args.threads)


if __name__ == "__main__":
    main()
