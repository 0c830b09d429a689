"""Accuracy against known truth: layers whose work takes a known time.

Two models:

* ``small`` (the precision target): a root looping over 20 blocks; each block
  has ~20 us of its own work (half before each child) and calls two leaves of
  ~30 us and ~40 us. The work is torch operators (``--work torch``, the
  default: a count of small ``add``s sized at start to take that long, as a
  real layer's work is) or a spin on ``time.perf_counter_ns`` (``--work
  spin``: deterministic in wall time). Target: every layer's total and self
  within 5 % of the truth, or within 1.5 us where 5 % is less than that.
* ``large``: spins; root (own 0.5 ms) -> [enc (own 0.2 ms) -> [a 2 ms, b 1 ms
  called twice], head 1.5 ms]. Target: within 2 %.

The truth is what an uninstrumented run spends: each layer's ``forward`` is
timed on its own, without any instrumentation, many times, interleaved with
the other layers, medians (see ``truth_of``); a layer's self time is its
forward's time minus its children's. The Python cost of calling a child
module (``Module.__call__``) is thus in the parent's self time, where it is
spent. The root's forward is the longest window (2 ms), so on a busy machine
its truth is the noisiest. layerprof's numbers come from ``layerprof.profile``
(the ``layerprof run`` path) with its default overhead correction, and with
``--no-correct`` for comparison. Each round measures the truth and both
profiles; per layer the round with the median error is kept. Prints the
worst and the median error and how many layers miss the bound.

    python benchmarks/accuracy.py [--model small|large|both] [--work torch|spin]
                                  [--iters 30] [--rounds 3] [--verbose]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

import layerprof

Work = Callable[[torch.Tensor], torch.Tensor]


def spin(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


def spin_work(us: float) -> Work:
    ns = int(us * 1000)

    def work(x: torch.Tensor) -> torch.Tensor:
        spin(ns)
        return x

    return work


_ADD_NS: list[float] = []


def torch_work(us: float) -> Work:
    """A fixed count of small ``add``s taking about ``us`` microseconds."""
    if not _ADD_NS:
        x = torch.zeros(16)
        samples = []
        for _ in range(200):
            t0 = time.perf_counter_ns()
            for _ in range(20):
                torch.add(x, 1.0)
            samples.append((time.perf_counter_ns() - t0) / 20)
        _ADD_NS.append(statistics.median(samples))
    n = max(1, round(us * 1000 / _ADD_NS[0]))

    def work(x: torch.Tensor) -> torch.Tensor:
        for _ in range(n):
            torch.add(x, 1.0)
        return x

    return work


class Leaf(nn.Module):
    def __init__(self, work: Work) -> None:
        super().__init__()
        self.work = work

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.work(x)


class Block(nn.Module):
    """~20 us of its own, split around two children of ~30 us and ~40 us."""

    def __init__(self, make: Callable[[float], Work]) -> None:
        super().__init__()
        self.half = make(10)
        self.a = Leaf(make(30))
        self.b = Leaf(make(40))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(self.half(x))
        return self.b(self.half(x))


class Blocks(nn.Module):
    def __init__(self, make: Callable[[float], Work], n: int = 20) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(make) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def Spin(us: float) -> Leaf:
    return Leaf(spin_work(us))


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


class Empty(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def truth_of(model: nn.Module, x: torch.Tensor, repeats: int) -> dict[str, tuple[float, float]]:
    """path -> (total, self) in ns of an uninstrumented run.

    Every layer's ``forward`` is timed on its own, without any instrumentation,
    ``repeats`` times, the layers in turn (interleaved, so they share the
    machine's load); the time of an empty module's forward timed the same way
    (the timer's and the call's own cost) is taken off each median. A layer's
    total is its forward's time (times its calls per forward), its self time
    that minus its children's totals: the Python cost of calling a child
    (``Module.__call__``) is in the parent's self time, where an
    uninstrumented run spends it.
    """
    layers = [(p, m) for p, m in model.named_modules() if not isinstance(m, nn.ModuleList)]
    samples: dict[str, list[int]] = {p: [] for p, _ in layers}
    empty: dict[str, list[int]] = {p: [] for p, _ in layers}
    blank = Empty()
    now = time.perf_counter_ns
    for _ in range(repeats):
        for path, module in layers:
            t0 = now()
            module.forward(x)
            samples[path].append(now() - t0)
            t0 = now()  # the timer's own cost, in the same state of the caches
            blank.forward(x)
            empty[path].append(now() - t0)
    fwd = {p: statistics.median(s) - statistics.median(empty[p]) for p, s in samples.items()}
    out: dict[str, tuple[float, float]] = {}
    for path, module in reversed(list(model.named_modules())):  # children first
        kids = sum(out[f"{path}.{n}" if path else n][0] for n, _ in module.named_children())
        if isinstance(module, nn.ModuleList):
            out[path] = (kids, 0.0)
            continue
        calls = calls_per_forward(model, path)
        out[path] = (calls * fwd[path], calls * (fwd[path] - kids))
    return out


def calls_per_forward(model: nn.Module, path: str) -> int:
    """Enc calls b twice; every other layer is called once per forward."""
    return 2 if isinstance(model, Root) and path == "enc.b" else 1


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
    ap.add_argument("--work", choices=["torch", "spin"], default="torch")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    x = torch.zeros(16)
    setups: list[tuple[str, nn.Module, float, float]] = []
    if a.model in ("small", "both"):
        make = torch_work if a.work == "torch" else spin_work
        setups.append((f"small (20 blocks, {a.work} work)", Blocks(make), 0.05, 1500.0))
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
