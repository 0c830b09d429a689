"""The one JSON codec: every ``to_dict``/``from_dict`` of layerprof's three schemas.

=========================  ===========================================================
``layerprof.profile/2``    a Profile: meta, latency, overhead, layers, ops, trace sections
``layerprof.trace/2``      a Run: ranks (each a profile/2 document), cross-rank results
``layerprof.diff/1``       a Diff: latency, steps, layers, ops, kernels; settings; gate
``layerprof.sweep/1``      a Sweep: one model over batch sizes, dtypes, threads
=========================  ===========================================================

Files written by layerprof 0.1.0 (``layerprof.profile/1``, ``layerprof.trace/1``)
still load: a profile/1 document is read field for field; a trace/1 document
kept only whole-trace sums per layer and operator, so its per-step numbers are
those sums divided by the steps, and the loaded run says so in a note.

Times are integer ns inside and ms (``*_ms``) / µs (``*_us``) in JSON. Per-
iteration samples are written only when asked (``samples=True``); a summary
(median, mean, p90, p99, min, max, std, n, MAD and the median's confidence
interval) always is, so a summary-only file still diffs (``diff`` then judges
noise from the summaries). Everything read is type-checked: a malformed file
is a :class:`~layerprof.errors.ProfileFormatError` naming the field.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from layerprof.codec.diff import diff_to_dict, read_diff
from layerprof.codec.legacy import read_legacy_run
from layerprof.codec.profile import layer_records, profile_body, read_profile
from layerprof.codec.run import read_run, run_to_dict
from layerprof.codec.schemas import (
    DIFF_SCHEMA,
    LEGACY_PROFILE,
    LEGACY_RUN,
    PROFILE_SCHEMA,
    RUN_SCHEMA,
    SCHEMAS,
    SWEEP_SCHEMA,
)
from layerprof.codec.sweep import read_sweep, sweep_to_dict
from layerprof.errors import ProfileFormatError
from layerprof.pivot.diff import Diff, GateResult
from layerprof.pivot.profile import Profile, Run
from layerprof.pivot.sections.sweep import Sweep
from layerprof.reading import read_json

__all__ = [
    "DIFF_SCHEMA",
    "PROFILE_SCHEMA",
    "RUN_SCHEMA",
    "SCHEMAS",
    "SWEEP_SCHEMA",
    "diff_from_dict",
    "from_dict",
    "layer_records",
    "load",
    "profile_from_dict",
    "run_from_dict",
    "to_dict",
]


def to_dict(
    obj: Any,
    *,
    samples: bool = False,
    top: int | None = None,
    gate: GateResult | None = None,
    **_: Any,
) -> dict[str, Any]:
    """The JSON document of a Profile, a Run or a Diff (``gate``: a diff's gate result)."""
    if isinstance(obj, Profile):
        return {"schema": PROFILE_SCHEMA, **profile_body(obj, samples=samples, top=top)}
    if isinstance(obj, Run):
        return run_to_dict(obj, samples=samples, top=top)
    if isinstance(obj, Diff):
        return diff_to_dict(obj, top=top, gate=gate)
    if isinstance(obj, Sweep):
        return sweep_to_dict(obj)
    raise TypeError(f"cannot encode a {type(obj).__name__}")


def dumps(obj: Any, *, samples: bool = False, **options: Any) -> bytes:
    """The JSON document of ``obj`` as the bytes layerprof writes (indented, one final
    newline): ``save()``, ``--json`` and the ``json`` renderer all write these."""
    import orjson

    data = to_dict(obj, samples=samples, **options)
    return orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"


def from_dict(data: Any, *, source: str = "<dict>") -> Profile | Run | Diff | Sweep:
    """Whatever layerprof document ``data`` is; ProfileFormatError for anything else."""
    if not isinstance(data, Mapping) or "schema" not in data:
        raise ProfileFormatError(
            f"{source}: not a layerprof profile, trace analysis or diff (no 'schema' key)",
            hint="make one with layerprof run --json, analyze --json or diff --json",
        )
    schema = data["schema"]
    readers: dict[str, Callable[[Any, str], Profile | Run | Diff | Sweep]] = {
        PROFILE_SCHEMA: read_profile,
        LEGACY_PROFILE: read_profile,
        RUN_SCHEMA: read_run,
        LEGACY_RUN: read_legacy_run,
        DIFF_SCHEMA: read_diff,
        SWEEP_SCHEMA: read_sweep,
    }
    reader = readers.get(schema) if isinstance(schema, str) else None
    if reader is None:
        raise ProfileFormatError(
            f"{source}: unknown schema {str(schema)[:60]!r}",
            hint="known: " + ", ".join(SCHEMAS) + "; re-create the file with this layerprof",
        )
    try:
        return reader(data, source)
    except ProfileFormatError as exc:
        if str(exc).startswith(source):
            raise
        raise ProfileFormatError(f"{source}: {exc}", hint=exc.hint) from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ProfileFormatError(f"{source}: malformed {schema} document ({exc})") from exc


def profile_from_dict(data: Any, *, source: str = "<dict>") -> Profile:
    loaded = from_dict(data, source=source)
    if not isinstance(loaded, Profile):
        raise ProfileFormatError(f"{source}: a {data.get('schema')} file, not a profile")
    return loaded


def run_from_dict(data: Any, *, source: str = "<dict>") -> Run:
    loaded = from_dict(data, source=source)
    if not isinstance(loaded, Run):
        raise ProfileFormatError(f"{source}: a {data.get('schema')} file, not a trace analysis")
    return loaded


def diff_from_dict(data: Any, *, source: str = "<dict>") -> Diff:
    loaded = from_dict(data, source=source)
    if not isinstance(loaded, Diff):
        raise ProfileFormatError(f"{source}: a {data.get('schema')} file, not a diff")
    return loaded


def load(
    path: str | os.PathLike[str], *, max_input_size: int | None = None
) -> Profile | Run | Diff | Sweep:
    """Read a saved profile, trace analysis or diff (bounded read, type-checked)."""
    p = Path(path)
    data = read_json(p, max_input_size=max_input_size, error=ProfileFormatError)
    return from_dict(data, source=str(p))
