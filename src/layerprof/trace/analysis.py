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


def analyze(path: str | os.PathLike[str], *, group_by_shape: bool = False) -> Run:
    """Analyze a ``.json`` / ``.json.gz`` trace or a directory of per-rank traces.

    Raises :class:`layerprof.errors.TraceError` (one line naming the file)
    for anything that is not a readable, non-empty trace.
    """
    names = trace_files(path)
    files, skipped = [], []
    for name in names:
        try:
            files.append(read_trace_file(name, keep_shapes=group_by_shape))
        except NotATraceError as exc:
            if len(names) == 1:
                raise
            # A directory may hold other JSON (saved profiles, configs): analyze
            # the traces it has and say what was left out. A damaged trace still
            # fails: a missing rank must not pass unnoticed.
            skipped.append(str(exc))
    if not files:
        raise TraceError(f"{path}: no readable trace among {len(names)} files ({skipped[0]})")
    ranks, source = assign_ranks(files)
    profiles = sorted(
        (
            analyze_file(f, rank, group_by_shape=group_by_shape)
            for f, rank in zip(files, ranks, strict=True)
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
        path=str(path),
        ranks=tuple(profiles),
        rank_source=source,
        cross=cross,
        skipped=tuple(skipped),
    )


def analyze_file(trace: TraceFile, rank: int, *, group_by_shape: bool = False) -> Profile:
    """One decoded trace file -> its Profile (the per-rank reducer)."""
    return reduce(
        trace.tables,
        trace.header,
        rank=rank,
        file=str(trace.path),
        group_by_shape=group_by_shape,
    )
