"""``layerprof.trace/2``: a Run of profile bodies (one per rank) and cross-rank results."""

from __future__ import annotations

from typing import Any

from layerprof.codec.distributed import encode_stragglers, read_stragglers
from layerprof.codec.fields import Fields, saved_notes, strings
from layerprof.codec.profile import profile_body, read_profile
from layerprof.codec.ranks import KEY, encode_layer_ranks, read_layer_ranks
from layerprof.codec.schemas import PROFILE_SCHEMA, RUN_SCHEMA
from layerprof.errors import ProfileFormatError
from layerprof.pivot.notes import Note, texts
from layerprof.pivot.profile import Profile, Run
from layerprof.pivot.sections.trace import CrossRank, RankLine, StepAcrossRanks
from layerprof.units import NS_PER_MS, ms


def run_to_dict(run: Run, *, samples: bool = False, top: int | None = None) -> dict[str, Any]:
    return {
        "schema": RUN_SCHEMA,
        "path": run.path,
        "rank_source": run.rank_source,
        "skipped": list(run.skipped),
        "failed": list(run.failed),
        "notes": texts(run.notes),
        "ranks": [{"rank": p.rank, **profile_body(p, samples=samples, top=top)} for p in run.ranks],
        "cross_rank": _cross(run.cross),
        KEY: encode_layer_ranks(run.layer_ranks),
        "stragglers": encode_stragglers(run.stragglers),
    }


def _cross(c: CrossRank | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "slowest_rank": c.slowest_rank,
        "ranks": [
            {
                "rank": line.rank,
                "median_step_ms": ms(line.median_step_ns),
                "communication_ms": line.communication_ns / NS_PER_MS,
                "compute_ms": line.compute_ns / NS_PER_MS,
            }
            for line in c.ranks
        ],
        "steps": [
            {
                "name": s.name,
                "ms_by_rank": {str(r): ns / NS_PER_MS for r, ns in s.ns_by_rank},
                "slowest_rank": s.slowest_rank,
                "spread_ms": s.spread_ns / NS_PER_MS,
            }
            for s in c.steps
        ],
    }


def read_run(data: Any, source: str) -> Run:
    f = Fields(data, "run")
    ranks = tuple(
        read_profile({**r.data, "schema": PROFILE_SCHEMA}, source)
        for r in f.objects("ranks", required=True)
    )
    return run_of(f, ranks, source, notes=saved_notes(f))


def run_of(f: Fields, ranks: tuple[Profile, ...], source: str, *, notes: tuple[Note, ...]) -> Run:
    """A Run of read ranks with the document's own fields (path, rank source, cross-rank)."""
    return Run(
        path=f.text("path", source),
        ranks=ranks,
        rank_source=f.text("rank_source", "file order"),
        cross=_read_cross(f.obj("cross_rank")),
        skipped=tuple(strings(f, "skipped")),
        failed=tuple(strings(f, "failed")),
        notes=notes,
        layer_ranks=read_layer_ranks(f),
        stragglers=read_stragglers(f.obj("stragglers")),
    )


def _read_cross(f: Fields | None) -> CrossRank | None:
    if f is None:
        return None
    steps = []
    for s in f.objects("steps"):
        by_rank = s.obj("ms_by_rank")
        pairs: list[tuple[int, int]] = []
        if by_rank is not None:
            for key in by_rank.data:
                if not str(key).lstrip("-").isdigit():
                    raise ProfileFormatError(f"{by_rank.where}: rank {key!r} is not a number")
                pairs.append((int(key), by_rank.ns(key)))
        steps.append(
            StepAcrossRanks(
                name=s.text("name"),
                ns_by_rank=tuple(sorted(pairs)),
                slowest_rank=s.integer("slowest_rank"),
                spread_ns=s.ns("spread_ms"),
            )
        )
    lines = tuple(
        RankLine(
            rank=r.integer("rank"),
            median_step_ns=r.opt_ns("median_step_ms"),
            communication_ns=r.ns("communication_ms"),
            compute_ns=r.ns("compute_ms"),
        )
        for r in f.objects("ranks")
    )
    return CrossRank(steps=tuple(steps), ranks=lines, slowest_rank=f.opt_integer("slowest_rank"))
