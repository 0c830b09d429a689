"""Files a user hands to diff or report -> what they hold, without importing torch."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof.errors import ProfileFormatError

if TYPE_CHECKING:
    from layerprof.profile import Profile


SCHEMA_KEY = re.compile(rb'"schema"\s*:')


def load_comparable(path: str, *, rank: int | None = None) -> Profile:
    """A saved profile, or a trace (file or directory) analyzed into a Profile.

    A file is sniffed from its first bytes (profiles start with their "schema"
    key), so a large trace is decoded once, by the trace reader. ``rank``
    picks a rank of a multi-rank trace (default: the lowest).
    """
    p = Path(path)
    if p.is_dir() or p.name.endswith(".gz") or not looks_like_layerprof(p):
        from layerprof.trace import analyze

        report = analyze(p)
        if rank is None and len(report.ranks) > 1:
            print(
                f"layerprof: {p}: comparing rank {report.rank().rank} of {len(report.ranks)}"
                " (choose with --rank)",
                file=sys.stderr,
            )
        return report.to_profile(rank)
    data = read_json(p)
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema in ("layerprof.profile/1", "layerprof.profile/2"):
        from layerprof.codec import profile_from_dict

        return profile_from_dict(data, source=str(p))
    if isinstance(schema, str) and schema.startswith("layerprof."):
        raise ProfileFormatError(
            f"{p}: a {schema} file cannot be compared (it holds summaries, not the"
            " per-iteration samples a diff needs)",
            hint="compare saved profiles (run --json) or the traces themselves",
        )
    raise ProfileFormatError(f"{p}: neither a layerprof profile nor a torch.profiler trace")


def looks_like_layerprof(p: Path) -> bool:
    """Whether a JSON file opens with a "schema" key (layerprof's files do)."""
    try:
        with p.open("rb") as handle:
            head = handle.read(4096)
    except FileNotFoundError as exc:
        raise ProfileFormatError(f"{p}: no such file") from exc
    except OSError as exc:
        raise ProfileFormatError(f"{p}: cannot read ({exc.strerror})") from exc
    return bool(SCHEMA_KEY.search(head))


def read_json(p: Path) -> Any:
    import orjson

    try:
        return orjson.loads(p.read_bytes())
    except FileNotFoundError as exc:
        raise ProfileFormatError(f"{p}: no such file") from exc
    except IsADirectoryError as exc:
        raise ProfileFormatError(f"{p}: is a directory") from exc
    except OSError as exc:
        raise ProfileFormatError(f"{p}: cannot read ({exc.strerror})") from exc
    except orjson.JSONDecodeError as exc:
        raise ProfileFormatError(f"{p}: not JSON ({exc})") from exc
