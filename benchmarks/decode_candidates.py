"""Two ways to build the event tables without a Python loop per event, measured
before choosing one (issue: "Decode and columns").

On one trace, interleaved rounds (medians of each round's ratio to the floor):

* floor: ``orjson.loads`` of the gunzipped text (and freeing what it built), as
  ``python -c`` runs it (the garbage collector on; every other side runs with
  it paused, as the reader does);
* current: ``layerprof.trace.reader.read_trace_file`` (orjson in batches, then
  the per-event collector loop of ``trace/events.py``);
* A, orjson + columns: ``orjson.loads``, then every field the collector reads
  taken column by column with C-level ``map(methodcaller("get", key))`` and
  turned into numpy arrays: the cost floor of a vectorised collector over
  orjson's dicts (no quirk handling yet, so a lower bound);
* B, msgspec typed decode: ``msgspec.json.decode`` into ``Struct`` types that
  name only the fields read (others are skipped without building objects),
  then the same columns; runs only where msgspec is importable (it would be a
  new dependency: this says whether it earns its place).

    python benchmarks/decode_candidates.py [--trace PATH] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import sys
import time
from collections.abc import Callable
from operator import methodcaller
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = (
    ROOT / "tests" / "data" / "hta" / "negative_queue_length_values_check" / "rank0.json.gz"
)
EVENT_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur")
ARG_KEYS = ("External id", "correlation", "Sequence number", "device", "stream", "bytes")


def text_of(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def floor(text: bytes) -> None:
    orjson.loads(text)


def current(path: Path) -> None:
    from layerprof.trace.reader import read_trace_file

    read_trace_file(path)


def _numeric(values: list[Any]) -> Any:
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array(values, dtype=object)


def _columns(events: list[Any], get_args: Callable[[Any], Any]) -> dict[str, Any]:
    cols: dict[str, Any] = {k: list(map(methodcaller("get", k), events)) for k in EVENT_KEYS}
    args = [a if a is not None else {} for a in map(get_args, events)]
    for k in ARG_KEYS:
        cols[k] = list(map(methodcaller("get", k), args))
    return {
        k: _numeric(v) if k in ("ts", "dur") else np.array(v, dtype=object) for k, v in cols.items()
    }


def candidate_a(text: bytes) -> None:
    doc = orjson.loads(text)
    _columns(doc["traceEvents"], methodcaller("get", "args"))


def candidate_b(decoder: Any) -> Callable[[bytes], None]:
    def run(text: bytes) -> None:
        doc = decoder.decode(text)
        events = doc.traceEvents
        cols = {k: [getattr(e, k) for e in events] for k in EVENT_KEYS}
        args = [e.args for e in events]
        for k, attr in zip(ARG_KEYS, ("external_id", "correlation", "seq", "device",
                                      "stream", "bytes"), strict=True):  # fmt: skip
            cols[k] = [getattr(a, attr) if a is not None else None for a in args]
        {k: np.array(v, dtype=object) for k, v in cols.items()}

    return run


def msgspec_decoder() -> Any:
    try:
        import msgspec
    except ImportError:
        return None

    # defstruct, not class bodies: this module's annotations are strings (PEP 563),
    # which msgspec cannot resolve for classes local to a function.
    def none(key: str) -> Any:
        return msgspec.field(default=None, name=key)

    args = msgspec.defstruct(
        "Args",
        [("external_id", Any, none("External id")), ("correlation", Any, None),
         ("seq", Any, none("Sequence number")), ("device", Any, None),
         ("stream", Any, None), ("bytes", Any, None)],
    )  # fmt: skip
    event = msgspec.defstruct(
        "Event", [*((k, Any, None) for k in EVENT_KEYS), ("args", args | None, None)]
    )
    Doc = msgspec.defstruct("Doc", [("traceEvents", list[event])])
    return msgspec.json.Decoder(Doc)


def seconds(fn: Callable[[], object], paused: bool) -> float:
    """``fn``'s time; ``paused``: with the garbage collector paused, as the reader runs."""
    if paused:
        gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    finally:
        gc.enable()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    text = text_of(args.trace)
    sides: dict[str, Callable[[], object]] = {"floor (orjson.loads)": lambda: floor(text)}
    try:
        import layerprof.trace.reader  # noqa: F401

        sides["current (read_trace_file)"] = lambda: current(args.trace)
    except ImportError:
        pass
    sides["A: orjson + map() columns"] = lambda: candidate_a(text)
    decoder = msgspec_decoder()
    if decoder is not None:
        b = candidate_b(decoder)
        sides["B: msgspec Structs + columns"] = lambda: b(text)
    for fn in sides.values():
        fn()  # warm
    rounds = [
        {name: seconds(fn, paused=i > 0) for i, (name, fn) in enumerate(sides.items())}
        for _ in range(args.repeat)
    ]
    base = next(iter(sides))
    print(f"{args.trace.name}: {len(text) / 1e6:.1f} MB of JSON, {args.repeat} interleaved rounds")
    for name in sides:
        ratio = median(r[name] / r[base] for r in rounds)
        print(f"  {name}: {median(r[name] for r in rounds) * 1e3:.0f} ms = {ratio:.2f}x the floor")
    if decoder is None:
        print("  B: msgspec not installed (pip install msgspec to measure it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
