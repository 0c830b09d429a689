"""analyze(): trace file(s) -> a Run of per-rank Profiles (see trace/reduce.py)."""

from __future__ import annotations

import os

from layerprof.errors import TraceError
from layerprof.profile import Profile, Run
from layerprof.trace.ranks import cross_rank
from layerprof.trace.reader import (
    NotATraceError,
    TraceFile,
    assign_ranks,
    read_trace_file,
    trace_files,
)
from layerprof.trace.reduce import reduce
from layerprof.trace.stragglers import stragglers


def analyze(
    path: str | os.PathLike[str],
    *,
    group_by_shape: bool = False,
    max_input_size: int | None = None,
    data: bytearray | None = None,
) -> Run:
    """Analyze a ``.json`` / ``.json.gz`` trace or a directory of per-rank traces.

    ``max_input_size``: the most bytes of JSON one file may hold or expand to
    (default: ``layerprof.reading.default_limit()``); ``data``: the bytes of
    the single file ``path`` when already read (a pipe can be read once).
    Raises :class:`layerprof.errors.TraceError` (one line naming the file)
    for anything that is not a readable, non-empty trace.
    """
    if data is not None:
        files = [read_trace_file(path, keep_shapes=group_by_shape, data=data)]
        return _run(str(path), files, [], group_by_shape=group_by_shape)
    names = trace_files(path)
    files, skipped = [], []
    for name in names:
        try:
            files.append(
                read_trace_file(name, keep_shapes=group_by_shape, max_input_size=max_input_size)
            )
        except NotATraceError as exc:
            if len(names) == 1:
                raise
            # A directory may hold other JSON (saved profiles, configs): analyze
            # the traces it has and say what was left out. A damaged trace still
            # fails: a missing rank must not pass unnoticed.
            skipped.append(str(exc))
    if not files:
        raise TraceError(f"{path}: no readable trace among {len(names)} files ({skipped[0]})")
    return _run(str(path), files, skipped, group_by_shape=group_by_shape)


def _run(path: str, files: list[TraceFile], skipped: list[str], *, group_by_shape: bool) -> Run:
    ranks = assign_ranks(files)
    profiles = sorted(
        (
            analyze_file(f, rank, group_by_shape=group_by_shape, extra_notes=ranks.notes)
            for f, rank in zip(files, ranks.ranks, strict=True)
        ),
        key=lambda p: p.rank or 0,
    )
    cross = None
    if len(profiles) > 1:
        cross = cross_rank(
            [p.rank or 0 for p in profiles],
            [p.steps for p in profiles if p.steps is not None],
            [p.kinds for p in profiles],
        )
    return Run(
        path=path,
        ranks=tuple(profiles),
        rank_source=ranks.source,
        cross=cross,
        skipped=tuple(skipped),
        stragglers=stragglers(profiles),
    )


def analyze_file(
    trace: TraceFile,
    rank: int,
    *,
    group_by_shape: bool = False,
    extra_notes: tuple[str, ...] = (),
) -> Profile:
    """One decoded trace file -> its Profile (the per-rank reducer)."""
    profile = reduce(
        trace.tables,
        trace.header,
        rank=rank,
        file=str(trace.path),
        group_by_shape=group_by_shape,
    )
    return profile.with_notes(*extra_notes) if extra_notes else profile
