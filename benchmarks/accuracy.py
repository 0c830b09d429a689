"""Accuracy against known truth: layers that busy-wait known times.

Two models, each layer spinning on ``time.perf_counter_ns`` for a known time
(a spin is deterministic in wall time: a context switch lengthens it only
when it outlasts the spin's end):

* ``small`` (the precision target): a root looping over 20 blocks; each block
  spins 20 us of its own (10 before each child) and calls two leaves spinning
  30 us and 40 us. Target: every layer's total and self within 5 % of the
  truth, or within 1.5 us where 5 % is less than that.
* ``large``: root (own 0.5 ms) -> [enc (own 0.2 ms) -> [a 2 ms, b 1 ms called
  twice], head 1.5 ms]. Target: within 2 %, the latency too.

The truth is what an uninstrumented run spends: every layer's ``forward`` is
timed on its own, without any instrumentation, many times (interleaved with
the others, medians), and a layer's self time is its forward's time minus its
children's. The Python cost of calling a child module (``Module.__call__``)
is thus in the parent's self time, where it is spent. layerprof's numbers
come from ``layerprof.profile`` (the ``layerprof run`` path) with its default
overhead correction, and with ``--no-correct`` for comparison. Prints one line
per layer kind, the worst and the median error, and how many layers miss.

    python benchmarks/accuracy.py [--model small|large|both] [--iters 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import layerprof


def spin(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


class Spin(nn.Module):
    def __init__(self, us: float) -> None:
        super().__init__()
        self.ns = int(us * 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spin(self.ns)
        return x


class Block(nn.Module):
    """20 us of its own, split around two children of 30 us and 40 us."""

    def __init__(self, own_us: float = 20, a_us: float = 30, b_us: float = 40) -> None:
        super().__init__()
        self.half = int(own_us * 500)
        self.a = Spin(a_us)
        self.b = Spin(b_us)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spin(self.half)
        x = self.a(x)
        spin(self.half)
        return self.b(x)


class Blocks(nn.Module):
    def __init__(self, n: int = 20) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class Enc(nn.Module):
    def __init__(self, s: float) -> None:
        super().__init__()
        self.own = int(200_000 * s)
        self.a = Spin(2000 * s)
        self.b = Spin(1000 * s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spin(self.own)
        return self.b(self.a(self.b(x)))


class Root(nn.Module):
    def __init__(self, s: float = 1.0) -> None:
        super().__init__()
        self.own = int(500_000 * s)
        self.enc = Enc(s)
        self.head = Spin(1500 * s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spin(self.own)
        return self.head(self.enc(x))


def forward_times(model: nn.Module, x: torch.Tensor, repeats: int) -> dict[str, float]:
    """Median uninstrumented time of each module's own ``forward`` (ns), interleaved."""
    calls: dict[str, Callable[[], Any]] = {
        path: (lambda m=m: m.forward(x)) for path, m in model.named_modules()
    }
    calls = {
        p: f for p, f in calls.items() if not isinstance(model.get_submodule(p), nn.ModuleList)
    }
    samples: dict[str, list[int]] = {p: [] for p in calls}
    now = time.perf_counter_ns
    for _ in range(repeats):
        for path, fn in calls.items():
            t0 = now()
            fn()
            samples[path].append(now() - t0)
    return {p: statistics.median(s) for p, s in samples.items()}


def truth_of(model: nn.Module, x: torch.Tensor, repeats: int) -> dict[str, tuple[float, float]]:
    """path -> (total, self) in ns: forward times, self = own forward minus the children's."""
    fwd = forward_times(model, x, repeats)
    out: dict[str, tuple[float, float]] = {}
    parents = {p: module for p, module in model.named_modules()}
    for path, module in model.named_modules():
        kids = [f"{path}.{n}" if path else n for n, _ in module.named_children()]
        parent = parents.get(path.rsplit(".", 1)[0] if "." in path else "")
        calls = calls_per_forward(parent, path) if path else 1
        if isinstance(module, nn.ModuleList):
            total = sum(fwd[k] for k in kids)
            out[path] = (total, 0.0)
            continue
        child_total = 0.0
        for k in kids:
            child = model.get_submodule(k)
            if isinstance(child, nn.ModuleList):
                child_total += sum(fwd[f"{k}.{n}"] for n, _ in child.named_children())
            else:
                child_total += fwd[k] * calls_per_forward(module, k)
        out[path] = (calls * fwd[path], calls * (fwd[path] - child_total))
    return out


def calls_per_forward(module: nn.Module | None, child_path: str) -> int:
    """Enc calls b twice; every other parent calls each child once."""
    return 2 if isinstance(module, Enc) and child_path.endswith(".b") else 1


def errors(
    prof: layerprof.Profile, truth: dict[str, tuple[float, float]], rel: float, floor_ns: float
) -> list[tuple[str, str, float, float, bool]]:
    """(path, 'total'|'self', measured, truth, within bound) for every layer and quantity."""
    out = []
    for path, (t_total, t_self) in truth.items():
        row = prof.row(path)
        if row.calls:
            pairs = (("total", row.total_ns, t_total), ("self", row.self_ns, t_self))
        else:
            pairs = (("total", row.total_ns, t_total),)  # a ModuleList: its total only
        for kind, got, want in pairs:
            ok = abs(got - want) <= max(rel * abs(want), floor_ns)
            out.append((path, kind, got, want, ok))
    return out


def report(name: str, errs: list[tuple[str, str, float, float, bool]], rel: float) -> None:
    relerr = [abs(g - w) / w for _, _, g, w, _ in errs if w > 0]
    worst = max(errs, key=lambda e: abs(e[2] - e[3]) / e[3] if e[3] > 0 else 0)
    misses = sum(not ok for *_, ok in errs)
    print(
        f"  {name:14s} median error {100 * statistics.median(relerr):5.2f} %,"
        f" worst {100 * max(relerr):6.2f} % ({worst[0] or '(root)'} {worst[1]}:"
        f" {worst[2] / 1e3:.2f} us vs truth {worst[3] / 1e3:.2f} us);"
        f" {misses} of {len(errs)} outside the bound"
    )


def by_kind(errs: list[tuple[str, str, float, float, bool]]) -> None:
    """Mean measured vs truth per kind of layer (e.g. all block selves)."""
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for path, kind, got, want, _ in errs:
        shape = ".".join("N" if p.isdigit() else p for p in path.split(".")) if path else "(root)"
        groups.setdefault((shape, kind), []).append((got, want))
    for (shape, kind), vals in groups.items():
        got = statistics.mean(v[0] for v in vals)
        want = statistics.mean(v[1] for v in vals)
        print(
            f"    {shape:16s} {kind:5s} {got / 1e3:9.2f} us  truth {want / 1e3:9.2f} us"
            f"  ({100 * (got - want) / want:+6.2f} %, x{len(vals)})"
            if want
            else f"    {shape:16s} {kind:5s} {got / 1e3:9.2f} us  truth 0"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", choices=["small", "large", "both"], default="both")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    x = torch.zeros(1)
    setups: list[tuple[str, nn.Module, float, float]] = []
    if a.model in ("small", "both"):
        setups.append(("small (20 blocks)", Blocks(), 0.05, 1500.0))
    if a.model in ("large", "both"):
        setups.append(("large", Root(), 0.02, 0.0))
    with torch.inference_mode():
        for name, model, rel, floor in setups:
            per_mode: dict[str, list[list[tuple[str, str, float, float, bool]]]] = {
                "corrected": [],
                "not corrected": [],
            }
            for _ in range(a.rounds):
                truth = truth_of(model, x, 4 * a.iters)
                for mode, correct in (("corrected", True), ("not corrected", False)):
                    prof = layerprof.profile(
                        model, x, warmup=3, iters=a.iters, correct_overhead=correct
                    )
                    per_mode[mode].append(errors(prof, truth, rel, floor))
            bound = f"{100 * rel:g} %" + (f" or {floor / 1e3:g} us" if floor else "")
            print(f"{name}: {a.rounds} rounds x {a.iters} iterations, bound {bound}")
            for mode, rounds in per_mode.items():
                merged = median_round(rounds)
                report(mode, merged, rel)
                if a.verbose:
                    by_kind(merged)


def median_round(
    rounds: list[list[tuple[str, str, float, float, bool]]],
) -> list[tuple[str, str, float, float, bool]]:
    """Per layer and quantity, the round with the median error (noise across rounds)."""
    out = []
    for i in range(len(rounds[0])):
        cands = sorted((r[i] for r in rounds), key=lambda e: abs(e[2] - e[3]))
        out.append(cands[len(cands) // 2])
    return out


if __name__ == "__main__":
    main()
