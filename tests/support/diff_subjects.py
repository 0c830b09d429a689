"""Profiles of real module trees with per-iteration samples drawn from controlled
distributions (exact expectations for the diff and the gate), and a layer slowed on purpose."""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerInfo, LayerSamples, Meta, OpStat


def mlp(hidden: int = 32, act: type[nn.Module] = nn.ReLU, depth: int = 3) -> nn.Module:
    mods: list[nn.Module] = []
    for i in range(depth):
        mods.append(nn.Linear(hidden, hidden))
        if i < depth - 1:
            mods.append(act())
    return nn.Sequential(*mods)


def infos(model: nn.Module) -> tuple[LayerInfo, ...]:
    out = []
    for path, mod in model.named_modules():
        parent = None if path == "" else path.rpartition(".")[0]
        out.append(LayerInfo(path=path, type=type(mod).__name__, parent=parent))
    return tuple(out)


def true_means(layers: tuple[LayerInfo, ...], seed: int = 1234) -> dict[str, float]:
    """Self-time means: leaves 50-500 µs, containers 3 µs (fixed by ``seed``)."""
    rng = np.random.default_rng(seed)
    parents = {i.parent for i in layers}
    return {
        i.path: 3_000.0 if i.path in parents else float(rng.uniform(50_000, 500_000))
        for i in layers
    }


def noisy(rng: np.random.Generator, mean: float, n: int, cv: float) -> np.ndarray:
    """Skewed timings: log-normal spread plus 5 % outliers 1.5-3x slower."""
    x = mean * rng.lognormal(0.0, cv, n)
    slow = rng.random(n) < 0.05
    x[slow] *= rng.uniform(1.5, 3.0, int(slow.sum()))
    return np.round(x).astype(np.int64)


def synth(
    model: nn.Module,
    *,
    seed: int,
    n: int = 20,
    cv: float = 0.1,
    factors: Mapping[str, float] | None = None,
    means: Mapping[str, float] | None = None,
    meta: Meta | None = None,
    ops: tuple[OpStat, ...] = (),
) -> Profile:
    """A consistent profile of ``model``: totals = self + children, latency = root total."""
    layers = infos(model)
    means = means or true_means(layers)
    factors = factors or {}
    rng = np.random.default_rng(seed)
    self_ns = {i.path: noisy(rng, means[i.path] * factors.get(i.path, 1.0), n, cv) for i in layers}
    total_ns = dict(self_ns)
    for info in sorted(layers, key=lambda i: -i.path.count(".") - (i.path != "")):
        if info.parent is not None:
            total_ns[info.parent] = total_ns[info.parent] + total_ns[info.path]
    samples = {
        p: LayerSamples(
            total_ns=tuple(int(v) for v in total_ns[p]),
            self_ns=tuple(int(v) for v in self_ns[p]),
            calls=1.0,
        )
        for p in self_ns
    }
    latency = np.round(total_ns[""] * rng.lognormal(0.0, 0.02, n)).astype(np.int64)
    return Profile(
        meta=meta or Meta(model=type(model).__name__, iters=n),
        layers=layers,
        samples=samples,
        latency_ns=tuple(int(v) for v in latency),
        ops=ops,
    )


class Sleep(nn.Module):
    """Waits ``us`` microseconds: a layer made slower on purpose.

    It sleeps rather than spins: a long busy-wait makes the scheduler preempt
    the process soon after, which would slow the next layer down too on a
    loaded machine.
    """

    def __init__(self, us: int) -> None:
        super().__init__()
        self.us = us

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.us / 1e6)
        return x
