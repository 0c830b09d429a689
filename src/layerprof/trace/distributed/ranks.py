"""Across ranks: step times side by side, the slowest rank, communication time, and
each layer's time on every rank. Pure functions of the ranks' typed Profiles: a
Run is merged from them however they were made (traces reduced by any executor,
or profiles saved by ``layerprof run`` under torchrun).

Steps are matched by name (``ProfilerStep#12`` on every rank); a step that
only some ranks recorded is still listed, with the ranks that have it.
Spread of a step = slowest minus fastest rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile, Run, rank_order
from layerprof.pivot.sections.ranks import LayerAcrossRanks
from layerprof.pivot.sections.trace import CrossRank, KindRow, RankLine, StepAcrossRanks, Steps
from layerprof.stats import median
from layerprof.trace.distributed.stragglers import stragglers
from layerprof.traceformat import GPU_STEP_SOURCE, STEP_SOURCE

_NAMED_STEPS = (STEP_SOURCE, GPU_STEP_SOURCE)  # ProfilerStep#N names one step on every rank


def merge(
    path: str,
    profiles: Sequence[Profile],
    *,
    rank_source: str = "file order",
    skipped: Sequence[str] = (),
    failed: Sequence[str] = (),
    notes: Sequence[Note] = (),
) -> Run:
    """One Run of per-rank Profiles (each with its rank set), with the cross-rank results."""
    ordered = rank_order(profiles)
    ranks = [p.rank or 0 for p in ordered]
    cross = None
    # Saved live profiles have no steps or kernel kinds: no table of dashes and zeros.
    if len(ordered) > 1 and any(p.trace.steps is not None or p.trace.kinds for p in ordered):
        cross = cross_rank(
            ranks, [p.trace.steps for p in ordered], [p.trace.kinds for p in ordered]
        )
    return Run(
        path=path,
        ranks=ordered,
        rank_source=rank_source,
        cross=cross,
        skipped=tuple(skipped),
        failed=tuple(failed),
        notes=tuple(notes),
        layer_ranks=_layers_across(ordered) if len(ordered) > 1 else (),
        stragglers=stragglers(ordered),
    )


def merge_profiles(path: str, names: Sequence[str], profiles: Sequence[Profile]) -> Run:
    """Saved per-rank profiles (``layerprof run`` under torchrun) as one Run: ranks from
    each profile's meta, else from the file names (``p.rank-1.json``), else file order."""
    from layerprof.trace.reader import rank_rules

    ranks = rank_rules(list(names), [p.rank for p in profiles], claim="the profile's meta rank")
    stamped = [
        with_rank(p, rank, ranks.notes) for p, rank in zip(profiles, ranks.ranks, strict=True)
    ]
    return merge(path, stamped, rank_source=ranks.source)


def with_rank(profile: Profile, rank: int, notes: Sequence[Note] = ()) -> Profile:
    """The profile re-stamped as ``rank`` (its source and meta), with ``notes`` added."""
    source = profile.trace.source
    stamped = replace(
        profile.with_trace(source=replace(source, rank=rank)) if source is not None else profile,
        meta=replace(profile.meta, extra={**profile.meta.extra, "rank": rank}),
    )
    return stamped.with_notes(*notes) if notes else stamped


def _layers_across(profiles: Sequence[Profile]) -> tuple[LayerAcrossRanks, ...]:
    """Each layer's total per forward on every rank that called it, in module order
    (the lowest rank's order first, then layers only later ranks have)."""
    by_path: dict[str, list[tuple[int, float]]] = {}
    types: dict[str, str] = {}
    for p in rank_order(profiles):
        rank = p.rank or 0
        for row in p.rows():
            if row.calls <= 0:  # never called (a ModuleList container): no time to compare
                continue
            types.setdefault(row.path, row.type)
            by_path.setdefault(row.path, []).append((rank, row.total_ns))
    out = []
    for path, values in by_path.items():
        times = [ns for _, ns in values]
        slow = max(values, key=lambda rv: (rv[1], -rv[0]))
        out.append(
            LayerAcrossRanks(
                path=path,
                type=types[path],
                ns_by_rank=tuple(sorted(values)),
                median_ns=float(median(times)),
                min_ns=min(times),
                max_ns=max(times),
                slowest_rank=slow[0],
            )
        )
    return tuple(out)


def cross_rank(
    ranks: Sequence[int], steps: Sequence[Steps | None], kinds: Sequence[tuple[KindRow, ...]]
) -> CrossRank:
    # ProfilerStep#N names a step across ranks; other step sources repeat one
    # name every iteration, so those steps are matched by their occurrence.
    by_name: dict[str, list[tuple[int, int]]] = {}
    lines = []
    for rank, st, kd in zip(ranks, steps, kinds, strict=True):
        done = st.complete if st is not None else ()
        seen: dict[str, int] = {}
        for s in done:
            k = seen[s.name] = seen.get(s.name, 0) + 1
            key = s.name if st is not None and st.source in _NAMED_STEPS else f"{s.name} #{k}"
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
