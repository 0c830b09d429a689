"""The distributed sections both ways: ``breakdown``, ``communication``, ``queues``,
``memory_timeline`` of a profile body and ``stragglers`` of a run.

Times are ms (``*_ms``; launch delays ``*_us``); a rank's clock origin and
the first arrival of a matched collective stay integer ns (``*_ns``): epoch ns
do not fit a double's ms to the ns. Files without these keys load with the
sections empty.
"""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields, asdict_ms, read_row, saved_notes
from layerprof.errors import ProfileFormatError
from layerprof.pivot.notes import texts
from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.distributed import (
    BREAKDOWN_PARTS,
    Breakdown,
    Collective,
    CollectiveMatch,
    Communication,
    DeviceTimeline,
    LaunchOutlier,
    MemoryTimeline,
    Queues,
    RankLateness,
    StepBreakdown,
    Stragglers,
    StreamQueue,
)
from layerprof.units import NS_PER_MS, NS_PER_US, ms, ns_from_ms


def encode_distributed(p: Profile) -> dict[str, Any]:
    """The distributed sections a profile has (absent ones are left out)."""
    out: dict[str, Any] = {}
    if p.trace.breakdown is not None:
        out["breakdown"] = {
            "parts": list(BREAKDOWN_PARTS),
            "steps": [asdict_ms(s) for s in p.trace.breakdown.steps],
        }
    if p.trace.communication is not None:
        out["communication"] = _communication(p.trace.communication)
    if p.trace.queues is not None:
        out["queues"] = _queues(p.trace.queues)
    if p.trace.memory_timeline is not None:
        out["memory_timeline"] = {
            "devices": [
                {**asdict_ms(d, skip=("points",)),
                 "points": _points(d.points, NS_PER_MS)}
                for d in p.trace.memory_timeline.devices
            ]
        }  # fmt: skip
    return out


def _points(points: tuple[tuple[int, int], ...], factor: int) -> list[list[float | int]]:
    return [[t / factor, v] for t, v in points]


def _communication(c: Communication) -> dict[str, Any]:
    return {
        "comm_ms": c.comm_ns / NS_PER_MS,
        "overlap_ms": c.overlap_ns / NS_PER_MS,
        "exposed_ms": c.exposed_ns / NS_PER_MS,
        "overlap_pct": c.overlap_pct,
        "compute_ms": c.compute_ns / NS_PER_MS,
        "origin_ns": c.origin_ns,
        "on_device": c.on_device,
        "collectives": [
            {**asdict_ms(x), "algbw_gb_s": x.algbw, "busbw_gb_s": x.busbw} for x in c.collectives
        ],
    }


def _queues(q: Queues) -> dict[str, Any]:
    return {
        "queue_limit": q.queue_limit,
        "sync_ms": q.sync_ns / NS_PER_MS,
        "full_launch_ms": q.full_launch_ns / NS_PER_MS,
        "blocked_ms": q.blocked_ns / NS_PER_MS,
        "delay_threshold_us": q.delay_threshold_ns / NS_PER_US,
        "delay_outliers": q.delay_outliers,
        "outliers": [
            {"name": o.name, "launch_ms": o.launch_ns / NS_PER_MS, "delay_us": o.delay_ns / NS_PER_US}
            for o in q.outliers
        ],
        "short_kernels": q.short_kernels,
        "short_kernel_ms": q.short_kernel_ns / NS_PER_MS,
        "kernels": q.kernels,
        # only where a graph launch was counted once (files without them read 0)
        **({"graph_launches": q.graph_launches, "graph_ops": q.graph_ops}
           if q.graph_launches else {}),
        "streams": [
            {**asdict_ms(s, skip=("series",)),
             "series": _points(s.series, NS_PER_MS)}
            for s in q.streams
        ],
    }  # fmt: skip


def read_distributed(f: Fields) -> dict[str, Any]:
    out: dict[str, Any] = {}
    b = f.obj("breakdown")
    if b is not None:
        out["breakdown"] = Breakdown(tuple(read_row(StepBreakdown, s) for s in b.objects("steps")))
    c = f.obj("communication")
    if c is not None:
        out["communication"] = Communication(
            collectives=tuple(read_row(Collective, x) for x in c.objects("collectives")),
            comm_ns=c.ns("comm_ms"),
            overlap_ns=c.ns("overlap_ms"),
            compute_ns=c.ns("compute_ms"),
            origin_ns=c.integer("origin_ns", 0),
            on_device=c.flag("on_device"),
        )
    q = f.obj("queues")
    if q is not None:
        out["queues"] = _read_queues(q)
    m = f.obj("memory_timeline")
    if m is not None:
        out["memory_timeline"] = MemoryTimeline(
            tuple(
                DeviceTimeline(
                    device=d.text("device"),
                    points=_read_points(d, "points"),
                    events=d.integer("events"),
                    peak_bytes=d.integer("peak_bytes"),
                    peak_ns=d.ns("peak_ms"),
                    peak_op=d.opt_text("peak_op"),
                    peak_layer=d.opt_text("peak_layer"),
                    peak_step=d.opt_text("peak_step"),
                )
                for d in m.objects("devices")
            )
        )
    return out


def _read_points(f: Fields, key: str) -> tuple[tuple[int, int], ...]:
    out = []
    for i, item in enumerate(f.items(key)):
        if (
            not isinstance(item, list)
            or len(item) != 2
            or isinstance(item[1], bool)
            or not isinstance(item[1], int)
        ):
            raise ProfileFormatError(f"{f.where}.{key}[{i}]: expected [ms, integer]")
        try:
            t = ns_from_ms(item[0])
        except (TypeError, ValueError) as exc:
            raise ProfileFormatError(f"{f.where}.{key}[{i}]: {exc}") from exc
        assert t is not None
        out.append((t, item[1]))
    return tuple(out)


def _read_queues(q: Fields) -> Queues:
    return Queues(
        streams=tuple(
            StreamQueue(
                device=s.integer("device"),
                stream=s.integer("stream"),
                ops=s.integer("ops"),
                max_length=s.integer("max_length"),
                mean_length=s.number("mean_length"),
                full_ns=s.ns("full_ms"),
                series=_read_points(s, "series"),
            )
            for s in q.objects("streams")
        ),
        queue_limit=q.integer("queue_limit"),
        sync_ns=q.ns("sync_ms"),
        full_launch_ns=q.ns("full_launch_ms"),
        delay_threshold_ns=round(q.number("delay_threshold_us") * NS_PER_US),
        delay_outliers=q.integer("delay_outliers"),
        outliers=tuple(
            LaunchOutlier(
                name=o.text("name"),
                launch_ns=o.ns("launch_ms"),
                delay_ns=round(o.number("delay_us") * NS_PER_US),
            )
            for o in q.objects("outliers")
        ),
        short_kernels=q.integer("short_kernels"),
        short_kernel_ns=q.ns("short_kernel_ms"),
        kernels=q.integer("kernels"),
        graph_launches=q.count("graph_launches", 0),
        graph_ops=q.count("graph_ops", 0),
    )


def encode_stragglers(s: Stragglers | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "matched": s.matched,
        "straggler": s.straggler,
        "median_skew_ms": ms(s.median_skew_ns),
        "step_spread_ms": ms(s.step_spread_ns),
        "notes": texts(s.notes),
        "ranks": [asdict_ms(r) for r in s.ranks],
        "worst": [_match(m) for m in s.worst],
    }


def _match(m: CollectiveMatch) -> dict[str, Any]:
    first = min(t for _, t in m.arrivals)
    return {
        "group": m.group,
        "kind": m.kind,
        "step": m.step,
        "index": m.index,
        "bytes": m.bytes,
        "last_rank": m.last_rank,
        "skew_ms": m.skew_ns / NS_PER_MS,
        "first_ns": first,
        "arrival_ms": {str(r): (t - first) / NS_PER_MS for r, t in m.arrivals},
    }


def read_stragglers(f: Fields | None) -> Stragglers | None:
    if f is None:
        return None
    return Stragglers(
        matched=f.integer("matched"),
        ranks=tuple(read_row(RankLateness, r) for r in f.objects("ranks")),
        worst=tuple(_read_match(m) for m in f.objects("worst")),
        straggler=f.opt_integer("straggler"),
        median_skew_ns=f.opt_ns("median_skew_ms"),
        step_spread_ns=f.opt_ns("step_spread_ms"),
        notes=saved_notes(f),
    )


def _read_match(m: Fields) -> CollectiveMatch:
    first = m.integer("first_ns")
    arrivals = m.obj("arrival_ms")
    pairs: list[tuple[int, int]] = []
    if arrivals is not None:
        for key in arrivals.data:
            if not str(key).lstrip("-").isdigit():
                raise ProfileFormatError(f"{arrivals.where}: rank {key!r} is not a number")
            pairs.append((int(key), first + arrivals.ns(key)))
    return CollectiveMatch(
        group=m.text("group"),
        kind=m.text("kind"),
        step=m.opt_text("step"),
        index=m.integer("index"),
        bytes=m.opt_integer("bytes"),
        arrivals=tuple(sorted(pairs)),
        last_rank=m.integer("last_rank"),
        skew_ns=m.ns("skew_ms"),
    )
