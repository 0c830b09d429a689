"""Synthetic histories: per-run layer times from known costs and a seeded generator
(no clock is read), as runs for the store and as saved profiles for the CLI.

A run's times are each layer's base cost x the run's drift (one factor for the
whole process, ``drift ** U(-1/2, 1/2)``: runs differ by up to ``drift`` - 1) x its
own noise (log-normal, ``noise``); a step multiplies one layer from one run on;
an outlier run is ``outlier`` times slower throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layerprof.history.records import Environment, Figure, LayerPoint, RunEntry
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerInfo, LayerSamples, Meta

MS = 1_000_000
#: (path, type, self cost in ns) of a small model; the root's children are its blocks.
LAYERS: tuple[tuple[str, str, int], ...] = (
    ("", "Net", MS // 10),
    ("embed", "Embedding", MS),
    ("block0", "Block", 3 * MS),
    ("block1", "Block", 3 * MS),
    ("block2", "Block", 2 * MS),
    ("norm", "LayerNorm", MS // 2),
    ("head", "Linear", 2 * MS),
)
ENV = Environment("Net", "testhost", "cpu", "2.x", "float32", ("8x64",))
T0_NS = 1_790_000_000 * 1_000_000_000  # a fixed start: runs an hour apart from it
HOUR_NS = 3_600 * 1_000_000_000


@dataclass(frozen=True)
class Shape:
    """What a synthetic history holds."""

    runs: int = 40
    drift: float = 1.3
    noise: float = 0.03
    step_layer: str | None = None
    step_at: int = 20
    step: float = 1.15
    outlier_run: int | None = None
    outlier: float = 2.0


def self_times(shape: Shape, seed: int) -> list[dict[str, int]]:
    """Per run, each layer's self time (ns per forward)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(shape.runs):
        factor = shape.drift ** rng.uniform(-0.5, 0.5)
        if i == shape.outlier_run:
            factor *= shape.outlier
        noise = np.exp(rng.normal(0.0, shape.noise, len(LAYERS)))
        times = {}
        for (path, _, cost), n in zip(LAYERS, noise, strict=True):
            step = shape.step if path == shape.step_layer and i >= shape.step_at else 1.0
            times[path] = round(cost * factor * n * step)
        out.append(times)
    return out


def entries(shape: Shape, seed: int, *, env: Environment = ENV) -> list[RunEntry]:
    """The history as runs for the store: commit ``c000``, ``c001``...; latency the sum."""
    runs = []
    for i, times in enumerate(self_times(shape, seed)):
        total = sum(times.values())
        layers = tuple(LayerPoint(p, t, total if p == "" else t) for p, t in times.items())
        runs.append(
            RunEntry(
                commit=f"c{i:03d}",
                env=env,
                when_ns=T0_NS + i * HOUR_NS,
                branch="main",
                figures=(Figure("latency", total),),
                layers=layers,
            )
        )
    return runs


def profile(times: dict[str, int], *, iters: int = 5, created: str = "fixed") -> Profile:
    """A saved-profile-shaped Profile with these self times (every iteration alike)."""
    infos = tuple(LayerInfo(p, t, None if p == "" else "") for p, t, _ in LAYERS)
    total = sum(times.values())
    samples = {
        p: LayerSamples([total if p == "" else t] * iters, [t] * iters, 1.0)
        for p, t in times.items()
    }
    meta = Meta(
        model=ENV.model,
        device=ENV.device,
        dtype=ENV.dtype,
        torch=ENV.torch,
        inputs=ENV.inputs,
        iters=iters,
        host=ENV.machine,
        created=created,
    )
    return Profile(meta=meta, layers=infos, samples=samples, latency_ns=[total] * iters)
