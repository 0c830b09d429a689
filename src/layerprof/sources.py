"""Files a user hands to diff or report -> what they hold, without importing torch."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof.errors import ProfileFormatError

if TYPE_CHECKING:
    from layerprof.profile import Profile


SCHEMA_KEY = re.compile(rb'"schema"\s*:')


def load_comparable(path: str, *, rank: int | None = None) -> tuple[Profile, list[str]]:
    """A saved profile, a saved trace analysis, or a trace (file or directory) -> one
    rank's Profile, with a line for the user when a rank was chosen for them.

    A file is sniffed from its first bytes (layerprof's files start with their
    "schema" key), so a large trace is decoded once, by the trace reader.
    ``rank`` picks a rank of a multi-rank trace (default: the lowest).
    """
    from layerprof.profile import Profile, Run

    p = Path(path)
    if p.is_dir() or p.name.endswith(".gz") or not looks_like_layerprof(p):
        from layerprof.trace import analyze

        loaded: Profile | Run | object = analyze(p)
    else:
        from layerprof.codec import from_dict

        loaded = from_dict(read_json(p), source=str(p))
    if isinstance(loaded, Profile):
        return loaded, []
    if isinstance(loaded, Run):
        chosen = loaded.rank(rank)
        said = []
        if rank is None and len(loaded.ranks) > 1:
            said.append(
                f"{p}: comparing rank {chosen.rank} of {len(loaded.ranks)} (choose with --rank)"
            )
        return chosen, said
    raise ProfileFormatError(
        f"{p}: a diff cannot be compared again",
        hint="compare saved profiles (run --json), trace analyses (analyze --json) or traces",
    )


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
