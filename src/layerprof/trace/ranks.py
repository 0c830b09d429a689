"""Across ranks: step times side by side, the slowest rank, communication time.

Steps are matched by name (``ProfilerStep#12`` on every rank); a step that
only some ranks recorded is still listed, with the ranks that have it.
Spread of a step = slowest minus fastest rank.
"""

from __future__ import annotations

from collections.abc import Sequence

from layerprof.sections import CrossRank, KindRow, RankLine, StepAcrossRanks, Steps
from layerprof.stats import median

NAMED_STEPS = ("ProfilerStep", "GPU ProfilerStep")  # ProfilerStep#N names one step on every rank


def cross_rank(
    ranks: Sequence[int], steps: Sequence[Steps], kinds: Sequence[tuple[KindRow, ...]]
) -> CrossRank:
    # ProfilerStep#N names a step across ranks; other step sources repeat one
    # name every iteration, so those steps are matched by their occurrence.
    by_name: dict[str, list[tuple[int, int]]] = {}
    lines = []
    for rank, st, kd in zip(ranks, steps, kinds, strict=True):
        done = st.complete
        seen: dict[str, int] = {}
        for s in done:
            k = seen[s.name] = seen.get(s.name, 0) + 1
            key = s.name if st.source in NAMED_STEPS else f"{s.name} #{k}"
            by_name.setdefault(key, []).append((rank, s.dur_ns))
        totals = {k.kind: k.total_ns for k in kd}
        lines.append(
            RankLine(
                rank=rank,
                median_step_ns=median([s.dur_ns for s in done]) if done else None,
                communication_ns=totals.get("communication", 0),
                compute_ns=totals.get("compute", 0),
            )
        )
    rows = []
    for name, values in by_name.items():
        slow = max(values, key=lambda rv: rv[1])
        rows.append(
            StepAcrossRanks(
                name=name,
                ns_by_rank=tuple(sorted(values)),
                slowest_rank=slow[0],
                spread_ns=slow[1] - min(v for _, v in values),
            )
        )
    timed = [line for line in lines if line.median_step_ns is not None]
    slowest = max(timed, key=lambda line: line.median_step_ns or 0.0).rank if timed else None
    return CrossRank(steps=tuple(rows), ranks=tuple(lines), slowest_rank=slowest)
