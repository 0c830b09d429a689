"""analyze(): trace file(s) -> a Run of per-rank Profiles (see trace/reduce.py).

Each rank's file is read, decoded and reduced by one call of :class:`RankJob`
(in this process, a worker process, or a Dask worker; see
``trace/jobs/executors.py``), which hands back only that rank's compact Profile
(about 1 % of the JSON: no event arrays cross a process boundary). The
client folds the results in as they finish, then numbers the ranks (which
needs every file's claim) and merges them (``trace/distributed/ranks.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from layerprof.errors import TraceError
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile, Run
from layerprof.trace.distributed.ranks import merge, with_rank
from layerprof.trace.jobs.executors import SerialExecutor, default_executor, parse_executor
from layerprof.trace.jobs.remote import TraceInput, list_inputs, read_trace_bytes, shown
from layerprof.trace.jobs.tasks import Executor, Failed
from layerprof.trace.reader import (
    NotATraceError,
    TraceFile,
    rank_rules,
    read_trace_file,
    unreadable,
)
from layerprof.trace.reduce import reduce
from layerprof.trace.stream import Progress as ReadProgress

if TYPE_CHECKING:
    from layerprof.trace.capturepair import CaptureInput

#: progress(done, total): called on the client each time a rank's result comes in
_ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class RankResult:
    """What a worker hands back for one file: its Profile (rank not yet known), the
    rank its header claims, or why it was skipped (valid JSON, not a trace)."""

    name: str
    profile: Profile | None = None
    distributed_rank: int | None = None
    skipped: str | None = None


@dataclass(frozen=True)
class RankJob:
    """The per-rank work, picklable: read one file (local or URL), decode, reduce."""

    group_by_shape: bool = False
    max_input_size: int | None = None
    timeout: float | None = None
    # bytes of a local file read so far (a serial run's one file: a callback does not
    # travel to a worker process)
    read_progress: ReadProgress | None = None

    def __call__(self, source: TraceInput) -> RankResult:
        # A local file is decoded as it is read (memory flat in its size); a remote
        # one is read whole first (remote.py).
        data = None
        if source.remote:
            data = read_trace_bytes(source, limit=self.max_input_size, timeout=self.timeout)
        elif source.listed and (why := unreadable(source.location)) is not None:
            raise TraceError(f"{source.name}: {why}")  # a FIFO would block, /dev/zero fill
        try:
            trace = read_trace_file(
                source.location,
                keep_shapes=self.group_by_shape,
                max_input_size=self.max_input_size,
                data=data,
                name=source.name,
                progress=self.read_progress,
            )
        except NotATraceError as exc:
            return RankResult(name=source.name, skipped=str(exc))
        finally:
            del data
        profile = analyze_file(trace, 0, group_by_shape=self.group_by_shape, file=source.name)
        # The raw events never travel: a Profile from a trace has none, and a
        # worker must not send them should it ever have some.
        return RankResult(
            name=source.name,
            profile=replace(profile, events=None),
            distributed_rank=trace.distributed_rank,
        )


def analyze(
    path: str | os.PathLike[str],
    *,
    group_by_shape: bool = False,
    max_input_size: int | None = None,
    data: bytearray | None = None,
    executor: Executor | str | None = None,
    progress: _ProgressFn | None = None,
    partial: bool = False,
    timeout: float | None = None,
    capture: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    read_progress: ReadProgress | None = None,
) -> Run:
    """Analyze a ``.json`` / ``.json.gz`` trace, a directory or glob of per-rank traces,
    or an fsspec URL naming any of those (``s3://bucket/job/``, ``gs://b/*.json.gz``).

    ``capture``: the trace(s) recorded while the CUDA/HIP graph that ``path`` replays
    was captured: each replayed kernel goes to the layer whose launch made it
    (``trace/capturepair.py``, docs/trace.md). A local folder holding one replay and
    ``capture_traces/execution_details.json`` is paired without it.

    ``max_input_size``: the most bytes of JSON one file may hold or expand to
    (default: ``layerprof.reading.default_limit()``, on each worker);
    ``data``: the bytes of the single file ``path`` when already read (a pipe
    can be read once). ``executor``: ``"serial"``, ``"processes[=N]"``,
    ``"dask[=ADDRESS]"`` or an :class:`~layerprof.trace.jobs.tasks.Executor`
    (default: ``processes`` for files big enough to repay a pool's start-up, else
    ``serial``; see :func:`~layerprof.trace.jobs.executors.default_executor`). ``progress(done, total)``
    is called as ranks finish. Raises :class:`layerprof.errors.TraceError`
    (naming every file that failed, with why) for anything that is not a
    readable, non-empty trace, after the other ranks finished; with
    ``partial=True`` the Run merges the ranks that worked and its notes name
    the ones that failed. ``timeout``: seconds an http(s) server may take to
    connect or to send the next bytes (default ``remote.DEFAULT_TIMEOUT``).
    ``read_progress(read, size)``: the bytes of the file read so far, called as one
    local file is read in this process (not for several files or a pool's workers).

    A URL's user name, password and query string values open the files and
    go nowhere else: the Run, its messages and its errors name the URL
    without them (``remote.shown``).
    """
    pair = graph_pair(path, capture) if data is None else None
    if pair is not None:
        from layerprof.trace.capturepair import analyze_pair  # see graph_pair

        replay, captures = pair
        return analyze_pair(
            replay, captures, group_by_shape=group_by_shape, max_input_size=max_input_size
        )
    name = shown(path)  # from here on, all that names the input
    if data is not None:
        trace = read_trace_file(path, keep_shapes=group_by_shape, data=data, name=name)
        ranks = rank_rules([name], [trace.distributed_rank])
        profile = analyze_file(trace, ranks.ranks[0], group_by_shape=group_by_shape, file=name)
        return merge(name, [profile], rank_source=ranks.source)
    sources = list_inputs(path, limit=max_input_size, timeout=timeout)
    del path
    runner = _executor(executor, sources)
    here = isinstance(runner, SerialExecutor) and len(sources) == 1
    job = RankJob(
        group_by_shape=group_by_shape,
        max_input_size=max_input_size,
        timeout=timeout,
        read_progress=read_progress if here else None,
    )
    results: dict[int, RankResult] = {}
    failed: dict[int, Failed] = {}
    labels = [s.name for s in sources]
    for i, outcome in runner.run(job, sources, labels):
        if isinstance(outcome, Failed):
            failed[i] = outcome
        else:
            results[i] = outcome
        if progress is not None:
            progress(len(results) + len(failed), len(sources))
    run = _gathered(name, sources, results, failed, partial=partial)
    said = getattr(runner, "notes", None)
    return replace(run, notes=(*run.notes, *said)) if said else run


def graph_pair(
    path: str | os.PathLike[str],
    capture: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None,
) -> tuple[str, list[CaptureInput]] | None:
    """The replay and its captures: ``capture`` (one path or several), or a local
    folder's ``capture_traces/``; None when neither applies (a plain analysis)."""
    local = isinstance(path, os.PathLike) or "://" not in str(path)
    folder = local and os.path.isdir(path)
    if capture is None and not (folder and os.path.isfile(_details(path))):
        return None
    if not local:
        raise TraceError(f"{shown(path)}: --capture reads a local replay trace, not a URL")
    # here, not at the top: the pairing's dataclasses and difflib (~15 ms at start-up)
    # only for a graph replay
    from layerprof.trace.capturepair import CaptureInput, paired_captures, replay_in

    if capture is not None:
        files = [capture] if isinstance(capture, (str, os.PathLike)) else list(capture)
        replay = replay_in(path) if folder else str(path)
        return replay, [CaptureInput(str(c)) for c in files]
    found = paired_captures(path) if folder else None
    return (replay_in(path), found) if found else None


def _details(folder: str | os.PathLike[str]) -> str:
    """Where a replay's folder names its captures (``capture_traces/execution_details.json``)."""
    return os.path.join(folder, "capture_traces", "execution_details.json")


def _executor(executor: Executor | str | None, sources: list[TraceInput]) -> Executor:

    if executor is None:
        return default_executor(len(sources), _estimated_seconds(sources))
    if isinstance(executor, str):
        return parse_executor(executor)
    return executor


#: analyze's time per byte of trace JSON in one process (0.55-0.75 s for the
#: 26 MB HTA trace), and how much a gzipped trace expands (that one: 19x; 10x
#: errs towards running small jobs here)
_SECONDS_PER_JSON_BYTE = 25e-9
_GZIP_EXPANSION = 10


def _estimated_seconds(sources: list[TraceInput]) -> list[float] | None:
    """Each local file's analyze time in this process, from its size; None when
    any is remote (sizes unknown before a worker opens it) or cannot be sized."""
    if len(sources) < 2 or any(s.remote for s in sources):
        return None
    try:
        sizes = [os.stat(s.location).st_size for s in sources]
    except OSError:
        return None  # a worker names the unreadable file
    return [
        size * _SECONDS_PER_JSON_BYTE * (_GZIP_EXPANSION if s.location.endswith(".gz") else 1)
        for s, size in zip(sources, sizes, strict=True)
    ]


def _gathered(
    path: str,
    sources: list[TraceInput],
    results: dict[int, RankResult],
    failed: dict[int, Failed],
    *,
    partial: bool,
) -> Run:
    """Number the ranks and merge; every failure named (an error unless ``partial``)."""
    if len(sources) == 1 and failed and failed[0].error is not None:
        raise failed[0].error  # one file: its own error, with its hint
    failures = [_failure_line(sources[i].name, failed[i].reason) for i in sorted(failed)]
    if failures and not (partial and _traces(results)):
        many = f"{len(failures)} of {len(sources)} traces failed: " if len(sources) > 1 else ""
        raise TraceError(
            many + "; ".join(failures),
            hint="--partial merges the ranks that worked" if len(sources) > 1 else None,
        )
    skipped = [results[i].skipped or "" for i in sorted(results) if results[i].skipped]
    done = [(i, results[i]) for i in sorted(results) if results[i].profile is not None]
    if not done:
        if len(sources) == 1 and skipped:
            raise NotATraceError(
                skipped[0],
                hint="export one with torch.profiler: prof.export_chrome_trace('trace.json')",
            )
        raise TraceError(f"{path}: no readable trace among {len(sources)} files ({skipped[0]})")
    ranks = rank_rules([r.name for _, r in done], [r.distributed_rank for _, r in done])
    profiles = [
        with_rank(r.profile, rank, ranks.notes)
        for (_, r), rank in zip(done, ranks.ranks, strict=True)
        if r.profile is not None
    ]
    notes = []
    if failures:
        notes.append(
            Note(
                "partial-merge",
                f"merged {len(profiles)} of {len(sources)} traces (--partial);"
                f" {len(failures)} failed and {'is' if len(failures) == 1 else 'are'} left out",
                {"merged": len(profiles), "traces": len(sources), "failed": len(failures)},
            )
        )
    return merge(
        path, profiles, rank_source=ranks.source, skipped=skipped, failed=failures, notes=notes
    )


def _traces(results: dict[int, RankResult]) -> bool:
    return any(r.profile is not None for r in results.values())


def _failure_line(name: str, reason: str) -> str:
    # A TraceError already names its file; other reasons (a dead worker) get the name.
    return reason if name in reason else f"{name}: {reason}"


def analyze_file(
    trace: TraceFile,
    rank: int,
    *,
    group_by_shape: bool = False,
    extra_notes: tuple[Note, ...] = (),
    file: str | None = None,
) -> Profile:
    """One decoded trace file -> its Profile (the per-rank reducer)."""
    profile = reduce(
        trace.tables,
        trace.header,
        rank=rank,
        file=file or str(trace.path),
        group_by_shape=group_by_shape,
    )
    return profile.with_notes(*extra_notes) if extra_notes else profile


__all__ = ["RankJob", "RankResult", "SerialExecutor", "analyze", "analyze_file", "graph_pair"]
