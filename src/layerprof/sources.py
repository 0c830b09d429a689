"""Files a user hands to diff or report -> what they hold, without importing torch."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof.errors import ProfileFormatError
from layerprof.reading import read_input

if TYPE_CHECKING:
    from layerprof.profile import Profile
    from layerprof.trace import TraceReport


SCHEMA_KEY = re.compile(rb'"schema"\s*:')
SNIFF_BYTES = 4096  # layerprof's files open with "schema": look no further


def load_comparable(
    path: str, *, rank: int | None = None, max_input_size: int | None = None
) -> Profile:
    """A saved profile, or a trace (file or directory) analyzed into a Profile.

    A file is read once (bounded by ``max_input_size``, see ``layerprof.reading``)
    and sniffed by content: layerprof's files open with their "schema" key,
    anything else is decoded by the trace reader. So a pipe works too
    (``diff <(zcat a.json.gz) b.json``). ``rank`` picks a rank of a
    multi-rank trace (default: the lowest).
    """
    from layerprof.trace import analyze

    p = Path(path)
    if p.is_dir():
        return _trace_profile(analyze(p, max_input_size=max_input_size), p, rank)
    data = read_input(p, limit=max_input_size, error=ProfileFormatError)
    if not SCHEMA_KEY.search(data, 0, SNIFF_BYTES):
        return _trace_profile(analyze(p, data=data), p, rank)
    doc = _loads(data, p)
    del data
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema == "layerprof.profile/1":
        from layerprof.profile import profile_from_dict

        return profile_from_dict(doc, source=str(p))
    if isinstance(schema, str) and schema.startswith("layerprof."):
        raise ProfileFormatError(
            f"{p}: a {schema} file cannot be compared (it holds summaries, not the"
            " per-iteration samples a diff needs)",
            hint="compare saved profiles (run --json) or the traces themselves",
        )
    raise ProfileFormatError(f"{p}: neither a layerprof profile nor a torch.profiler trace")


def _trace_profile(report: TraceReport, p: Path, rank: int | None) -> Profile:
    if rank is None and len(report.ranks) > 1:
        print(
            f"layerprof: {p}: comparing rank {report.rank().rank} of {len(report.ranks)}"
            " (choose with --rank)",
            file=sys.stderr,
        )
    return report.to_profile(rank)


def read_json(p: Path, *, max_input_size: int | None = None) -> Any:
    """A JSON file's value (gzip or not), read within the input size ceiling."""
    return _loads(read_input(p, limit=max_input_size, error=ProfileFormatError), p)


def _loads(data: bytearray, p: Path) -> Any:
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ProfileFormatError(f"{p}: not JSON ({exc})") from exc
