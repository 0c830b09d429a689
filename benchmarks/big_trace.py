"""A ~1 GB trace made of a real one, for the speed figures at scale.

Writes ``--copies`` copies of a real trace's events one after another in time
(each copy shifted past the previous one's end; its correlation, external
and flow ids shifted past the previous one's, so links stay within a copy),
with the original's other keys, as one JSON file (``.json.gz`` when the name
ends so). Metadata events (``ph`` "M") are written once. Then time it:

    python benchmarks/big_trace.py /tmp/big.json [--copies 40]
    python benchmarks/analyze_speed.py --trace /tmp/big.json --repeat 3 --no-memory \\
        --baseline ../main/src

``--trace`` defaults to HTA's 26 MB ``negative_queue_length_values_check``
trace in ``tests/data/hta`` (40 copies: about 1 GB of JSON, 4.4 M events).
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path
from typing import IO, Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = (
    ROOT / "tests" / "data" / "hta" / "negative_queue_length_values_check" / "rank0.json.gz"
)


def plain_text(path: Path) -> bytes:
    """A trace file's JSON text, gunzipped when gzip."""
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


_IDS = ("External id", "correlation", "external id")


def shifted(event: dict[str, Any], dt: int, did: int) -> dict[str, Any]:
    """``event`` moved by ``dt`` µs, its ids by ``did``."""
    out = dict(event)
    if isinstance(out.get("ts"), int | float):
        out["ts"] = out["ts"] + dt
    if isinstance(out.get("id"), int):  # flow events
        out["id"] = out["id"] + did
    args = out.get("args")
    if isinstance(args, dict):
        moved = {k: args[k] + did for k in _IDS if isinstance(args.get(k), int) and args[k] > 0}
        if moved:
            out["args"] = {**args, **moved}
    return out


def write(source: Path, target: Path, copies: int) -> int:
    """Write the big trace; return its events."""
    doc = orjson.loads(plain_text(source))
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]
    stamps = [e["ts"] for e in timed if isinstance(e.get("ts"), int | float)]
    span = int(max(stamps) - min(stamps)) + 1000
    ids = [e.get("id") for e in timed] + [(e.get("args") or {}).get(k) for e in timed for k in _IDS]
    id_step = max((i for i in ids if isinstance(i, int)), default=0) + 1
    opener: Any = gzip.open if target.name.endswith(".gz") else open
    out: IO[bytes]
    with opener(target, "wb") as out:
        out.write(b'{"traceEvents": [')
        out.write(b",".join(orjson.dumps(e) for e in meta))
        n = len(meta)
        for k in range(copies):
            batch = [shifted(e, k * span, k * id_step) for e in timed]
            out.write(b"," if n else b"")
            out.write(orjson.dumps(batch)[1:-1])
            n += len(batch)
        out.write(b"], ")
        out.write(orjson.dumps(doc)[1:])
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--copies", type=int, default=40)
    a = ap.parse_args()
    n = write(a.trace, a.target, a.copies)
    print(f"{a.target}: {n} events, {a.target.stat().st_size / 1e9:.2f} GB on disk")


if __name__ == "__main__":
    main()
