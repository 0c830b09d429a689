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

The truth is what an uninstrumented run spends: each layer's ``forward`` is
timed on its own, without any instrumentation, with its children replaced by
empty modules (its own work and the calls; see ``truth_of``), many times,
interleaved with the other layers, medians. The Python cost of calling a
child module (``Module.__call__``) is thus in the parent's self time, where
it is spent. layerprof's numbers
come from ``layerprof.profile`` (the ``layerprof run`` path) with its default
overhead correction, and with ``--no-correct`` for comparison. Prints one line
per layer kind, the worst and the median error, and how many layers miss.

    python benchmarks/accuracy.py [--model small|large|both] [--iters 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager

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


class Empty(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


@contextmanager
def emptied(module: nn.Module) -> Iterator[None]:
    """``module`` with each direct child (each item of a child ModuleList) replaced by
    an empty module: its forward then does only its own work and the calls."""
    saved: list[tuple[nn.Module, str, nn.Module]] = []
    for name, child in module.named_children():
        owners = (
            [(child, str(i)) for i in range(len(child))]
            if isinstance(child, nn.ModuleList)
            else [(module, name)]
        )
        for owner, key in owners:
            saved.append((owner, key, owner._modules[key]))  # type: ignore[arg-type]
            owner._modules[key] = Empty()
    try:
        yield
    finally:
        for owner, key, original in saved:
            owner._modules[key] = original


def truth_of(model: nn.Module, x: torch.Tensor, repeats: int) -> dict[str, tuple[float, float]]:
    """path -> (total, self) in ns of an uninstrumented run.

    A layer's self time is the median time of its ``forward`` with its children
    emptied (so the calls are there, the children's work is not), minus the
    time of an empty module's ``forward`` timed the same way (the timer's own
    cost); its total is its self time plus its children's totals. Each timing
    is short (one layer's own work), so a context switch rarely lands in it,
    and the layers are timed in turn (interleaved), so they share the load.
    """
    layers = [(p, m) for p, m in model.named_modules() if not isinstance(m, nn.ModuleList)]
    samples: dict[str, list[int]] = {p: [] for p, _ in layers}
    empty: list[int] = []
    blank = Empty()
    now = time.perf_counter_ns
    for _ in range(repeats):
        t0 = now()
        blank.forward(x)
        empty.append(now() - t0)
        for path, module in layers:
            with emptied(module):
                t0 = now()
                module.forward(x)
                samples[path].append(now() - t0)
    base = statistics.median(empty)
    own = {p: statistics.median(s) - base for p, s in samples.items()}
    out: dict[str, tuple[float, float]] = {}
    for path, module in reversed(list(model.named_modules())):  # children first
        calls = calls_per_forward(model, path)
        if isinstance(module, nn.ModuleList):
            out[path] = (sum(out[f"{path}.{n}"][0] for n, _ in module.named_children()), 0.0)
            continue
        kids = sum(out[f"{path}.{n}" if path else n][0] for n, _ in module.named_children())
        out[path] = (calls * (own[path] + kids), calls * own[path])
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
