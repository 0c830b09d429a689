"""Forwards split by phase (prefill, decode, or a phase the user named): each layer's
time per forward of each phase, from a Recorder's per-forward samples. Shared by
``profile(..., generate=N)`` and the Recorder around a user's own decode loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from layerprof.sections.generation import Phase, PhaseLayer
from layerprof.stats import Summary

PREFILL, DECODE = "prefill", "decode"
#: An encoder-decoder's encoder, which ``generate()`` runs once before the first forward.
ENCODE = "encode"


def phase_views(
    samples: Mapping[str, Any],
    names: Sequence[str | None],
    positions: Sequence[float | None],
    tokens: Mapping[str, int],
) -> tuple[Phase, ...]:
    """Per phase (in first-seen order), each layer's total and self per forward of that
    phase, and in decode its growth with the position. ``names`` and ``positions`` hold
    one entry per iteration of ``samples`` (None: a forward of no phase, or no known
    position); ``tokens``: tokens per forward of each phase."""
    order = list(dict.fromkeys(n for n in names if n is not None))
    labels = np.array([n if n is not None else "" for n in names])
    where = np.array([p if p is not None else np.nan for p in positions], dtype=np.float64)
    out = []
    for name in order:
        picked = np.flatnonzero(labels == name)
        layers = []
        for path, s in samples.items():
            total, self_ = s.total_ns.values, s.self_ns.values
            if total is None or self_ is None or len(total) != len(names):
                continue  # a layer not called once per forward: no per-forward split
            if not total[picked].any() and not self_[picked].any():
                continue  # not run in this phase (an encoder's layers while decoding)
            own = self_[picked].astype(np.float64)
            at = where[picked]
            growth = None
            known = ~np.isnan(at)
            if name == DECODE and known.sum() >= 3 and np.ptp(at[known]) > 0:
                growth = float(np.polyfit(at[known], own[known], 1)[0]) * 1000
            layers.append(
                PhaseLayer(
                    path=path,
                    total_ns=float(np.median(total[picked])),
                    self_ns=float(np.median(own)),
                    self_summary=Summary.of(own.tolist()),
                    growth_ns_per_1k=growth,
                )
            )
        out.append(Phase(name, len(picked), tokens.get(name, 0), tuple(layers)))
    return tuple(out)
