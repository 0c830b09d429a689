"""Files a user hands to diff or report -> what they hold, without importing torch."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof import reading
from layerprof.errors import ProfileFormatError, UsageError
from layerprof.reading import read_input

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile, Run


_SCHEMA_KEY = re.compile(rb'"schema"\s*:')
_SNIFF_BYTES = 4096  # layerprof's files open with "schema": look no further


def load_comparable(
    path: str, *, rank: int | None = None, max_input_size: int | None = None
) -> tuple[Profile, list[str]]:
    """A saved profile, a saved trace analysis, or a trace (file or directory) -> one
    rank's Profile, with a line for the user when a rank was chosen for them.

    A file is read once (bounded by ``max_input_size``, see ``layerprof.reading``)
    and sniffed by content: layerprof's files open with their "schema" key,
    anything else is decoded by the trace reader. So a pipe works too
    (``diff <(zcat a.json.gz) b.json``). ``rank`` picks a rank of a multi-rank
    trace or analysis (default: the lowest).
    """
    from layerprof.codec import from_dict
    from layerprof.pivot.diff import Diff
    from layerprof.pivot.profile import Profile
    from layerprof.pivot.sections.sweep import Sweep
    from layerprof.trace import analyze

    local_files([path], "diff")
    p = Path(path)
    if p.is_dir():
        return _one_rank(analyze(p, max_input_size=max_input_size), p, rank)
    data = read_input(p, limit=max_input_size, error=ProfileFormatError)
    if not _SCHEMA_KEY.search(data, 0, _SNIFF_BYTES):
        return _one_rank(analyze(p, data=data), p, rank)
    loaded = from_dict(_loads(data, p), source=str(p))
    del data
    if isinstance(loaded, Diff):
        raise ProfileFormatError(
            f"{p}: a diff cannot be compared again",
            hint="compare saved profiles (run --json), trace analyses (analyze --json) or traces",
        )
    if isinstance(loaded, Profile):
        return loaded, []
    if isinstance(loaded, Sweep):
        raise ProfileFormatError(
            f"{p}: a sweep holds many runs, not one to compare",
            hint="compare saved profiles (run --json), trace analyses (analyze --json) or traces",
        )
    return _one_rank(loaded, p, rank)


def load_ranks(paths: list[str], *, max_input_size: int | None = None) -> Run:
    """Saved profiles of one job's ranks (``p.rank-0.json p.rank-1.json``) as one Run."""
    from layerprof.codec import load
    from layerprof.pivot.profile import Profile
    from layerprof.trace.distributed.ranks import merge_profiles

    profiles = []
    for path in paths:
        loaded = load(path, max_input_size=max_input_size)
        if not isinstance(loaded, Profile):
            raise ProfileFormatError(
                f"{path}: holds a {type(loaded).__name__}; only saved profiles are merged",
                hint="give one file, or the profiles each rank wrote (p.rank-*.json)",
            )
        profiles.append(loaded)
    label = " ".join(paths) if len(paths) <= 4 else f"{len(paths)} profiles ({paths[0]}, ...)"
    return merge_profiles(label, paths, profiles)


def local_files(paths: list[str], command: str) -> None:
    """UsageError for a URL among ``paths`` (``command`` reads files on this machine),
    naming it without the user name, password and query string values it may carry:
    a mistyped argument must not put a secret on screen."""
    from layerprof.trace.jobs.remote import is_url, redact

    for path in paths:
        if is_url(path):
            raise UsageError(
                f"{redact(path)}: {command} reads files on this machine, not URLs",
                hint="layerprof analyze URL --json FILE saves a trace's analysis to compare",
            )


def _one_rank(run: Run, p: Path, rank: int | None) -> tuple[Profile, list[str]]:
    chosen = run.rank(rank)
    said = []
    if rank is None and len(run.ranks) > 1:
        said.append(f"{p}: comparing rank {chosen.rank} of {len(run.ranks)} (choose with --rank)")
    return chosen, said


def read_json(p: Path, *, max_input_size: int | None = None) -> Any:
    """A saved layerprof file's JSON (gzip or not), read within the input size ceiling."""
    return reading.read_json(p, max_input_size=max_input_size, error=ProfileFormatError)


def _loads(data: bytearray, p: Path) -> Any:
    import orjson

    reading.check_decodable(len(data), str(p), error=ProfileFormatError)  # orjson crashes OOM
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ProfileFormatError(f"{p}: not JSON ({exc})") from exc
