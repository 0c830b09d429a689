"""Trace files -> EventTables: gzip, JSON decode in batches, rank discovery.

Decoding the whole ``traceEvents`` array at once holds every event dict in
memory at the same time (about 4x the JSON text). Instead the array is
decoded a few MB at a time: a batch ends at a ``}`` ``,`` ``{`` boundary and
is parsed as ``[`` + slice + ``]``. A slice cut inside a nested object or a
string cannot parse, so a batch that parses ended on a real element boundary;
one that does not is retried at the next boundary. The last batch is parsed
together with every other top-level key (which may come before or after
``traceEvents``) by splicing the document around the events already read.
"""

from __future__ import annotations

import gc
import os
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from layerprof.errors import TraceError
from layerprof.trace.events import EventCollector, EventTables

BATCH_BYTES = 4 << 20
_MAX_RETRIES = 16
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_RANK_IN_NAME = re.compile(r"rank[-_](\d+)", re.IGNORECASE)
TRACE_SUFFIXES = (".json", ".json.gz")


@dataclass(frozen=True)
class TraceFile:
    """One decoded trace file: where it came from, its header keys, its events."""

    path: Path
    header: dict[str, Any]
    tables: EventTables

    @property
    def distributed_rank(self) -> int | None:
        info = self.header.get("distributedInfo")
        rank = info.get("rank") if isinstance(info, dict) else None
        return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


@contextmanager
def gc_paused() -> Iterator[None]:
    """Decoding allocates millions of containers; the cyclic GC only slows it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_bytes(path: Path) -> bytearray:
    """The file's JSON text, gunzipped when it is gzip (by magic, not by name).

    A bytearray, because ``_batches`` brackets each batch in place.
    """
    try:
        with path.open("rb") as handle:
            head = handle.read(2)
            handle.seek(0)
            if head == b"\x1f\x8b":
                return _gunzip(handle, path)
            return bytearray(handle.read())
    except FileNotFoundError as exc:
        raise TraceError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise TraceError(f"{path}: is a directory") from exc
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _gunzip(handle: BinaryIO, path: Path) -> bytearray:
    """Decompress straight into one growing buffer (no second full-size copy)."""
    out = bytearray()
    inflater = zlib.decompressobj(wbits=31)
    pending = b""
    try:
        while chunk := pending or handle.read(1 << 20):
            pending = b""
            if inflater.eof:  # another gzip member follows (or trailing junk)
                if chunk[:2] != b"\x1f\x8b":
                    break
                inflater = zlib.decompressobj(wbits=31)
            out += inflater.decompress(chunk)
            if inflater.eof:
                pending = inflater.unused_data
    except zlib.error as exc:
        raise TraceError(f"{path}: corrupt gzip ({exc})") from exc
    if not inflater.eof:
        raise TraceError(f"{path}: truncated gzip (the file ends mid-stream)")
    return out


_NON_SPACE = re.compile(rb"\S")


def decode(data: bytearray, consume: Callable[[list[Any]], None], source: str) -> dict[str, Any]:
    """Feed ``traceEvents`` to ``consume`` in batches; return the other top-level keys."""
    if _NON_SPACE.search(data) is None:
        raise TraceError(f"{source}: empty file")
    with gc_paused():
        match = _EVENTS_KEY.search(data)
        if match is None:
            doc = _loads(data, source)
            if isinstance(doc, list):  # Chrome's bare "JSON Array Format"
                consume(doc)
                return {}
            _require_trace(doc, source)
            return dict(doc)  # pragma: no cover - _require_trace raises
        head, pos = match.start(), match.end()
        pos = _batches(data, pos, consume)
        # The rest of the events plus every other key, as one small document.
        rest: bytes | bytearray = data
        if pos > match.end():
            rest = b"".join((data[:head], b'"traceEvents":[', memoryview(data)[pos:]))
        doc = _loads(rest, source)
        del rest
        _require_trace(doc, source)
        events = doc.pop("traceEvents")
        consume(events)
        return dict(doc)


def _batches(data: bytearray, pos: int, consume: Callable[[list[Any]], None]) -> int:
    """Consume whole batches from ``pos``; return where the unread events start.

    ``data[pos - 1]`` is the array's ``[`` or a separator byte, and so is the
    byte after a boundary's ``}``: writing ``[`` and ``]`` there turns the
    batch into a JSON array in place, parsed from a memoryview without a copy.
    """
    size = len(data)
    view = memoryview(data)
    try:
        while pos + BATCH_BYTES < size:
            boundaries = _BOUNDARY.finditer(data, pos + BATCH_BYTES)
            for _ in range(_MAX_RETRIES):
                found = next(boundaries, None)
                if found is None:
                    return pos
                end = found.start() + 1
                saved = data[pos - 1], data[end]
                data[pos - 1], data[end] = 0x5B, 0x5D  # "[" and "]"
                try:
                    batch = orjson.loads(view[pos - 1 : end + 1])
                except orjson.JSONDecodeError:
                    continue  # the boundary was inside a nested value or string
                finally:
                    data[pos - 1], data[end] = saved
                consume(batch)
                del batch
                pos = found.end() - 1
                break
            else:
                return pos
        return pos
    finally:
        view.release()


def _loads(data: bytes | bytearray, source: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"{source}: not valid JSON ({exc})") from exc


class NotATraceError(TraceError):
    """Valid JSON, but not a trace (a saved profile, a config): a directory skips it."""


def _require_trace(doc: Any, source: str) -> None:
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise NotATraceError(
            f"{source}: not a Chrome/Kineto trace (no 'traceEvents' list)",
            hint="export one with torch.profiler: prof.export_chrome_trace('trace.json')",
        )


def read_trace_file(path: str | os.PathLike[str], *, keep_shapes: bool = False) -> TraceFile:
    """Decode one ``.json`` / ``.json.gz`` trace into typed tables."""
    p = Path(path)
    data = read_bytes(p)
    collector = EventCollector(keep_shapes=keep_shapes)
    header = decode(data, collector.add_batch, str(p))
    del data
    tables = collector.finish()
    if len(tables.host) == 0 and len(tables.device) == 0:
        raise TraceError(f"{p}: empty trace (no CPU or GPU spans among {tables.events} events)")
    return TraceFile(path=p, header=header, tables=tables)


def trace_files(path: str | os.PathLike[str]) -> list[Path]:
    """The trace files a path names: itself, or a directory's ``*.json[.gz]``."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file or directory")
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
        if not files:
            raise TraceError(f"{p}: directory holds no .json or .json.gz trace files")
        return files
    return [p]


def assign_ranks(files: list[TraceFile]) -> tuple[list[int], str]:
    """Rank of each file and how it was found (the report says which)."""
    from_info = [f.distributed_rank for f in files]
    if all(r is not None for r in from_info) and len(set(from_info)) == len(files):
        return [r for r in from_info if r is not None], "distributedInfo.rank"
    from_name = [_rank_from_name(f.path.name) for f in files]
    if all(r is not None for r in from_name) and len(set(from_name)) == len(files):
        return [r for r in from_name if r is not None], "file name (rank-N / rank_N)"
    return list(range(len(files))), "file order"


def _rank_from_name(name: str) -> int | None:
    m = _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None
