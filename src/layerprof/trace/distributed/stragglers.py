"""Across ranks: the same collective on every rank, who arrived last, and how late.

Works on the per-rank typed results only (each rank's ``Communication`` and
``Steps``), never on event arrays, so ranks can be reduced anywhere first.

* **Matching.** Every rank issues a process group's collectives in the same
  order, so the n-th all-reduce of group ``g`` in step ``ProfilerStep#5`` is
  one instance on every rank: key (group, kind, step, n), or (group,
  sequence number) where the trace writes one. Ranks profiled over different
  windows match on the steps they share.
* **Clocks.** Ranks on different hosts do not share a clock, but a
  collective ends at about the same time on every rank (no rank can finish
  before the last one arrives). Each rank's offset to the reference (lowest)
  rank is the median difference of matched collectives' end times; arrival
  times are compared on the aligned clock.
* **Skew** of an instance = last arrival - first arrival. The *straggler* is
  the rank that arrives last most often, when it does so at least twice as
  often as an even share would give (at most 75 % of the instances).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import islice
from statistics import median

from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.distributed import (
    Collective,
    CollectiveMatch,
    Communication,
    RankLateness,
    Stragglers,
)

WORST_MATCHES = 20
_Key = tuple[object, ...]


def _collective_key(c: Collective) -> _Key:
    if c.seq is not None:
        return ("seq", c.group, c.seq)
    return (c.group, c.kind, c.step, c.index)


def stragglers(profiles: Sequence[Profile]) -> Stragglers | None:
    """Collectives matched across the ranks' profiles; None with fewer than two ranks
    or no collective at all."""
    comms = {p.rank or 0: p.trace.communication for p in profiles}
    present = {r: c for r, c in comms.items() if c is not None and c.collectives}
    if len(profiles) < 2 or not present:
        return None
    notes = _rank_notes(profiles, comms)
    by_key: dict[_Key, dict[int, Collective]] = {}
    for rank, comm in sorted(present.items()):
        for c in comm.collectives:
            by_key.setdefault(_collective_key(c), {}).setdefault(rank, c)
    shared = {k: v for k, v in by_key.items() if len(v) > 1}
    offsets = _clock_offsets(present, shared)
    pairs = [(k, _match(v, present, offsets)) for k, v in shared.items()]
    matches = [m for _, m in pairs]
    lateness = _lateness(profiles, present, by_key, pairs, offsets)
    for line in lateness:
        if line.unmatched:
            notes.append(
                Note(
                    "unmatched-collectives",
                    f"rank {line.rank}: {line.unmatched} of {line.collectives} collectives match"
                    " no other rank (different profiling windows, or a collective that never"
                    " completed)",
                    {
                        "rank": line.rank,
                        "unmatched": line.unmatched,
                        "collectives": line.collectives,
                    },
                )
            )
    if not shared:
        notes.append(
            Note("no-matched-collective", "no collective matched across ranks: no arrival skew")
        )
    skews = [m.skew_ns for m in matches]
    return Stragglers(
        matched=len(matches),
        ranks=tuple(lateness),
        worst=tuple(sorted(matches, key=lambda m: -m.skew_ns)[:WORST_MATCHES]),
        straggler=_straggler(lateness, len(matches), len(present)),
        median_skew_ns=round(median(skews)) if skews else None,
        step_spread_ns=_spread([line.median_step_ns for line in lateness]),
        notes=tuple(notes),
    )


def _rank_notes(profiles: Sequence[Profile], comms: dict[int, Communication | None]) -> list[Note]:
    notes: list[Note] = []
    ranks = sorted(comms)
    sizes = [
        c.group_size
        for comm in comms.values()
        if comm is not None
        for c in comm.collectives
        if c.group_size
    ]
    expected = max(max(sizes, default=0), ranks[-1] + 1)
    if expected > len(ranks):
        # Ids and sizes come from the traces: never allocate by them (a 5 KB trace may
        # claim rank 2**31 - 1); at most len(ranks) + 9 ids are looked at here.
        present = set(ranks)
        first = list(islice((r for r in range(expected) if r not in present), 9))
        shown = ", ".join(str(r) for r in first[:8]) + (" ..." if len(first) > 8 else "")
        notes.append(
            Note(
                "missing-ranks",
                f"{len(ranks)} of {expected} ranks present; missing: {shown}"
                " (stragglers are judged among the ranks present)",
                {"present": len(ranks), "expected": expected, "missing": tuple(first[:8])},
            )
        )
    counts = {
        p.rank or 0: len(p.trace.steps.complete) if p.trace.steps is not None else 0
        for p in profiles
    }
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"rank {r}: {n}" for r, n in sorted(counts.items()))
        text = f"ranks have different numbers of complete steps ({listed})"
        notes.append(Note("step-counts-differ", text, {"steps": dict(sorted(counts.items()))}))
    for rank, comm in sorted(comms.items()):
        if comm is None or not comm.collectives:
            text = f"rank {rank} has no collectives in its trace"
            notes.append(Note("no-collectives", text, {"rank": rank}))
    return notes


def _clock_offsets(
    present: dict[int, Communication], shared: dict[_Key, dict[int, Collective]]
) -> dict[int, int]:
    """Each rank's clock minus the reference rank's, from matched end times."""
    ref = min(present)
    out = {ref: 0}
    for rank in present:
        if rank == ref:
            continue
        diffs = [
            _abs_end(present[rank], v[rank]) - _abs_end(present[ref], v[ref])
            for v in shared.values()
            if rank in v and ref in v
        ]
        out[rank] = int(median(diffs)) if diffs else 0
    return out


def _abs_end(comm: Communication, c: Collective) -> int:
    return comm.origin_ns + c.end_ns


def _match(
    by_rank: dict[int, Collective],
    present: dict[int, Communication],
    offsets: dict[int, int],
) -> CollectiveMatch:
    arrivals = tuple(
        sorted((r, present[r].origin_ns + c.start_ns - offsets[r]) for r, c in by_rank.items())
    )
    last = max(arrivals, key=lambda a: (a[1], a[0]))
    first = min(t for _, t in arrivals)
    any_c = next(iter(by_rank.values()))
    return CollectiveMatch(
        group=any_c.group,
        kind=any_c.kind,
        step=any_c.step,
        index=any_c.index,
        bytes=any_c.bytes,
        arrivals=arrivals,
        last_rank=last[0],
        skew_ns=last[1] - first,
    )


def _lateness(
    profiles: Sequence[Profile],
    present: dict[int, Communication],
    by_key: dict[_Key, dict[int, Collective]],
    pairs: list[tuple[_Key, CollectiveMatch]],
    offsets: dict[int, int],
) -> list[RankLateness]:
    last: dict[int, list[tuple[_Key, CollectiveMatch]]] = {}
    for key, m in pairs:
        last.setdefault(m.last_rank, []).append((key, m))
    out = []
    for p in sorted(profiles, key=lambda p: p.rank or 0):
        rank = p.rank or 0
        comm = present.get(rank)
        mine = comm.collectives if comm is not None else ()
        unmatched = sum(1 for c in mine if len(by_key[_collective_key(c)]) < 2)
        late = last.get(rank, [])
        own = [by_key[key][rank] for key, _ in late]
        tops = Counter(c.prior_top for c in own if c.prior_top)
        out.append(
            RankLateness(
                rank=rank,
                collectives=len(mine),
                unmatched=unmatched,
                last=len(late),
                late_ns=sum(m.skew_ns for _, m in late),
                median_late_ns=round(median(m.skew_ns for _, m in late)) if late else None,
                prior_compute_ns=round(median(c.prior_compute_ns for c in own)) if own else None,
                prior_top=tops.most_common(1)[0][0] if tops else None,
                clock_offset_ns=offsets.get(rank, 0),
                median_step_ns=round(p.latency.median) if p.latency is not None else None,
            )
        )
    return out


def _straggler(lines: list[RankLateness], matched: int, ranks: int) -> int | None:
    if matched == 0 or ranks < 2:
        return None
    top = max(lines, key=lambda line: (line.last, -line.rank))
    if top.last / matched >= min(0.75, 2.0 / ranks):
        return top.rank
    return None


def _spread(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) - min(known) if len(known) > 1 else None
