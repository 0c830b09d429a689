"""A Profile -> the runs it brings into a history (no torch, no I/O).

A profile of one process is one run: its latency (summary, and samples when the
profile kept them), each layer's self and total medians with their spread, host
and device, a generate's phases and a training loop's step parts. A ``run
--repeat N`` profile is N runs of the same commit, one per process, from each
process's medians: the process is where run-to-run drift lives, so each process
counts as one observation of the commit (their per-iteration spread is not kept
in the file: those runs have no spread).
"""

from __future__ import annotations

import datetime as dt
from functools import partial

from layerprof.history.records import Environment, Figure, LayerPoint, RunEntry
from layerprof.pivot.profile import LayerRow, Profile, ancestors
from layerprof.pivot.sections.loop import STEP_PARTS
from layerprof.pivot.sections.repeats import RunMedians
from layerprof.stats import Series, Summary


def environment(profile: Profile) -> Environment:
    """The environment a profile ran in, read from its meta."""
    meta = profile.meta
    return Environment(
        model=meta.model,
        machine=meta.host,
        device=meta.device,
        torch=meta.torch,
        dtype=meta.dtype,
        inputs=tuple(meta.inputs),
    )


def when_of(profile: Profile) -> int | None:
    """When the profile was made (ns since the epoch), from its meta; None if unknown."""
    return parse_when(profile.meta.created) if profile.meta.created else None


def parse_when(text: str) -> int | None:
    """An ISO 8601 time (a naive one is UTC) or a number of seconds since the epoch
    -> ns since the epoch; None if it is neither."""
    try:
        return round(float(text) * 1e9)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def entries(
    profile: Profile, *, commit: str, when_ns: int, branch: str | None, source: str | None
) -> list[RunEntry]:
    """The runs ``profile`` brings: one, or one per process of a ``run --repeat``."""
    entry = partial(
        RunEntry,
        commit=commit,
        env=environment(profile),
        when_ns=when_ns,
        branch=branch,
        source=source,
    )
    repeats = profile.repeats
    if repeats is not None and repeats.n > 1:
        return [
            entry(process=i, figures=_process_figures(r), layers=_process_layers(r))
            for i, r in enumerate(repeats.runs)
        ]
    samples = profile.latency_ns.values if profile.latency_ns is not None else None
    return [
        entry(
            figures=figures(profile),
            layers=layers(profile),
            latency_samples_ns=tuple(samples.tolist()) if samples is not None else None,
        )
    ]


def figures(profile: Profile) -> tuple[Figure, ...]:
    """Latency, a generate's time to first token, inter-token latency and per-phase
    forward, and a training loop's step and its parts."""
    out = []
    if profile.latency is not None:
        out.append(_figure("latency", profile.latency))
    gen = profile.generation
    if gen is not None:
        for name, series in (("ttft", gen.ttft_ns), ("itl", gen.itl_ns)):
            if series is not None:
                out.append(_figure(f"generate.{name}", series.summary))
        for phase in gen.phases:
            root = phase.layer("")
            if root is not None:
                out.append(Figure(f"phase.{phase.name}", round(root.total_ns)))
    loop = profile.loop
    if loop is not None and loop.steps:
        out.append(_figure("loop.step", loop.summary("wall")))
        out.extend(_figure(f"loop.{part}", loop.summary(part)) for part in STEP_PARTS)
    return tuple(out)


def layers(profile: Profile) -> tuple[LayerPoint, ...]:
    """Each layer that took time: medians per forward and their spread (MAD)."""
    return tuple(
        _point(row, profile.samples.get(row.path))
        for row in profile.rows()
        if row.total_ns > 0 or (row.device_total_ns or 0) > 0
    )


def _point(row: LayerRow, samples: object) -> LayerPoint:
    device_self = getattr(samples, "device_self_ns", None)
    device_total = getattr(samples, "device_total_ns", None)
    return LayerPoint(
        path=row.path,
        self_ns=round(max(row.self_ns, 0.0)),
        total_ns=round(max(row.total_ns, 0.0)),
        self_spread_ns=_mad(row.self_summary),
        total_spread_ns=_mad(row.total),
        device_self_ns=_opt(row.device_self_ns),
        device_total_ns=_opt(row.device_total_ns),
        device_self_spread_ns=_mad(device_self.summary)
        if isinstance(device_self, Series)
        else None,
        device_total_spread_ns=(
            _mad(device_total.summary) if isinstance(device_total, Series) else None
        ),
    )


def _process_figures(run: RunMedians) -> tuple[Figure, ...]:
    """A process's latency and, for a generate, its time to first token, inter-token
    latency and each phase's forward (its layers' self times summed)."""
    out = []
    for name, value in (
        ("latency", run.latency_ns),
        ("generate.ttft", run.ttft_ns),
        ("generate.itl", run.itl_ns),
    ):
        if value is not None:
            out.append(Figure(name, value))
    for phase, times in (run.phase_self_ns or {}).items():
        out.append(Figure(f"phase.{phase}", sum(times.values())))
    return tuple(out)


def _process_layers(run: RunMedians) -> tuple[LayerPoint, ...]:
    """A process's layers: its self medians, each total the sum over its subtree."""
    device = dict(run.device_self_ns) if run.device_self_ns is not None else None
    totals = _subtree_sums(dict(run.self_ns))
    device_totals = _subtree_sums(device) if device is not None else {}
    return tuple(
        LayerPoint(
            path=path,
            self_ns=own,
            total_ns=totals[path],
            device_self_ns=device.get(path) if device is not None else None,
            device_total_ns=device_totals.get(path),
        )
        for path, own in run.self_ns.items()
    )


def _subtree_sums(self_ns: dict[str, int]) -> dict[str, int]:
    """Each path's self time plus every descendant's (a total per forward, by definition)."""
    out = dict(self_ns)
    for path, own in self_ns.items():
        for parent in ancestors(path):
            if parent in out:
                out[parent] += own
    return out


def _figure(name: str, summary: Summary) -> Figure:
    return Figure(name, round(summary.median), _mad(summary), summary.n)


def _mad(summary: Summary | None) -> int | None:
    return None if summary is None or summary.mad is None else round(summary.mad)


def _opt(value: float | None) -> int | None:
    return None if value is None else round(max(value, 0.0))
