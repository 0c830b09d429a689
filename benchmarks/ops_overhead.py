"""Ops mode vs plain ``torch.profiler(with_stack=True)``, and hooks vs ops per-layer agreement.

    python benchmarks/ops_overhead.py [--iters 20] [--repeats 5] [--threads 1]

Prints one run's ratios (not a timed assert):

* ``loop``: wall time of the profiled forwards (profiler running) in ops mode
  over the same with a plain ``torch.profiler.profile(with_stack=True)``,
  which is what torch needs to attribute ops to modules (as ``Linear_3``).
  Target <= 1.1.
* ``end-to-end``: profiler start + forwards + stop + the per-layer result
  (ops mode: attribution into ops per layer; torch: ``key_averages()``).
* ``agreement``: per-layer total time of ops mode (``layer:`` ranges) against
  hooks mode, both from ``layerprof.profile`` as ``layerprof run`` makes them
  (each corrected for its own recording cost), in alternating rounds: the
  median abs % difference over the layers taking at least 1 % of the
  forward (target <= 3 %), and the median signed one (the bias); per round, and
  pooled (each layer's median over the rounds in each mode, which takes out
  most of the round-to-round noise of a shared machine); ops mode also with
  ``--no-correct`` in the same rounds, so the correction's effect shows under
  the same load.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

import layerprof
from layerprof.capture.options import OpOptions
from layerprof.capture.profiling.profiler import capture_ops
from layerprof.load.demo import build
from layerprof.stats import median


def plain_with_stack(model: Any, x: Any, iters: int) -> tuple[float, float]:
    """(loop seconds, end-to-end seconds) of torch.profiler(with_stack=True) + key_averages."""
    t0 = time.perf_counter()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True
    ) as prof:
        t1 = time.perf_counter()
        for _ in range(iters):
            model(x)
            prof.step()
        t2 = time.perf_counter()
    prof.key_averages()
    return t2 - t1, time.perf_counter() - t0


def ops_mode(model: Any, x: Any, iters: int) -> tuple[float, float]:
    """(loop seconds, end-to-end seconds) of capture_ops + per-layer ops and samples."""
    loop: list[float] = []
    original = torch.profiler.profile.step

    def timed_step(self: Any) -> None:  # first/last step() bracket the forwards
        loop.append(time.perf_counter())
        original(self)

    torch.profiler.profile.step = timed_step  # type: ignore[method-assign]
    try:
        t0 = time.perf_counter()
        loop.append(t0)
        cap = capture_ops(model, (x,), None, iters=iters, device="cpu", options=OpOptions())
        cap.profile()  # ops and samples per layer
        end = time.perf_counter()
    finally:
        torch.profiler.profile.step = original  # type: ignore[method-assign]
    # loop[1] is the first step() after the first forward; the steps after it are
    # timed. capture_ops runs one discarded warm-up step more than ``iters``, so
    # compare the mean cost per step over the same number of iterations.
    per_iter = (loop[-1] - loop[1]) / max(len(loop) - 2, 1)
    return per_iter * iters, end - t0


def alternate(
    fns: dict[str, Callable[[], tuple[float, float]]], repeats: int
) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            out[name].append(fn())
    return out


Totals = dict[str, tuple[float, float]]  # layer -> (hooks total, ops total) in ns


def agreement(model: Any, x: Any, iters: int, rounds: int) -> dict[str, list[Totals]]:
    """Per round, the per-layer totals of hooks mode and ops mode, both as ``layerprof
    run`` makes them (``layerprof.profile``, default correction), and of ops mode with
    ``--no-correct`` (the profiler's recording cost left in), run one after the other
    in each round, over the layers taking at least 1 % of the forward."""
    out: dict[str, list[Totals]] = {"corrected": [], "not corrected": []}
    for _ in range(rounds):
        hooks = {r.path: r for r in layerprof.profile(model, x, warmup=3, iters=iters).rows()}
        root = hooks[""].total_ns
        for name, correct in (("corrected", True), ("not corrected", False)):
            prof = layerprof.profile(
                model, x, warmup=3, iters=iters, ops=True, correct_overhead=correct
            )
            ops = {r.path: r for r in prof.rows()}
            out[name].append(
                {
                    p: (r.total_ns, ops[p].total_ns)
                    for p, r in hooks.items()
                    if r.calls and p in ops and r.total_ns >= 0.01 * root
                }
            )
    return out


def differences(totals: Totals) -> tuple[float, float]:
    """(median abs %, median signed %) difference of ops mode over hooks mode."""
    diffs = [(o - h) / h * 100 for h, o in totals.values()]
    return median([abs(d) for d in diffs]), median(diffs)


def pooled(rounds: list[Totals]) -> Totals:
    """Each layer's median over rounds in each mode: the systematic difference, with
    the round-to-round noise of a shared machine mostly gone."""
    layers = set.intersection(*(set(r) for r in rounds))
    return {
        p: (median([r[p][0] for r in rounds]), median([r[p][1] for r in rounds])) for p in layers
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = build("transformer").eval()
    x = torch.randint(0, 1000, (8, 64))
    with torch.inference_mode():
        for _ in range(5):
            model(x)
        runs = alternate(
            {
                "plain": lambda: plain_with_stack(model, x, args.iters),
                "ops": lambda: ops_mode(model, x, args.iters),
            },
            args.repeats,
        )
    plain_loop = median([r[0] for r in runs["plain"]])
    ops_loop = median([r[0] for r in runs["ops"]])
    plain_e2e = median([r[1] for r in runs["plain"]])
    ops_e2e = median([r[1] for r in runs["ops"]])
    print(
        f"ops_overhead: demo transformer 8x64, {args.iters} iters x {args.repeats} repeats,"
        f" {args.threads} thread(s), torch {torch.__version__}"
    )
    print(
        f"loop: ops mode {ops_loop / args.iters * 1e3:.3f} ms/iter vs torch.profiler(with_stack=True)"
        f" {plain_loop / args.iters * 1e3:.3f} ms/iter -> ratio {ops_loop / plain_loop:.3f}"
        " (target <= 1.1)"
    )
    print(
        f"end-to-end (start..per-layer table): ops mode {ops_e2e * 1e3:.1f} ms vs"
        f" with_stack + key_averages {plain_e2e * 1e3:.1f} ms -> ratio {ops_e2e / plain_e2e:.3f}"
    )
    modes = agreement(model, x, args.iters, args.repeats)
    for name, rounds in modes.items():
        per_round = [differences(r) for r in rounds]
        absd = [r[0] for r in per_round]
        signed = [r[1] for r in per_round]
        pooled_abs, pooled_signed = differences(pooled(rounds))
        print(
            f"agreement, ops mode {name} vs hooks mode: per-layer total over"
            f" {len(rounds[0])} layers (>= 1 % of the forward), {len(rounds)} rounds:"
            f" median abs difference {median(absd):.1f} % (rounds {min(absd):.1f}-"
            f"{max(absd):.1f}), median signed {median(signed):+.1f} %; pooled (each layer's"
            f" median over the rounds): {pooled_abs:.1f} %, signed {pooled_signed:+.1f} %"
        )
    print("target: corrected, median abs difference <= 3 %")


if __name__ == "__main__":
    main()
