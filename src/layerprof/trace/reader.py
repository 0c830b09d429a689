"""Trace files -> EventTables: gzip, JSON decode in batches, rank discovery.

Decoding the whole ``traceEvents`` array at once holds every event dict in
memory at the same time (about 4x the JSON text). Instead the array is
decoded 256 KiB at a time: a batch ends at a ``}`` ``,`` ``{`` boundary and
is parsed as ``[`` + slice + ``]``. A slice cut inside a nested object or a
string cannot parse, so a batch that parses ended on a real element boundary;
one that does not is retried at the next boundary. The last batch is parsed
together with every other top-level key (which may come before or after
``traceEvents``) by splicing the document around the events already read.

A local file is not read whole first: :func:`decode_chunks` cuts the same batches
from text that arrives in chunks (``trace/stream.py``), dropping what it decoded,
so memory stays flat as files grow; the unread tail is capped (:data:`MAX_RECORD`).
"""

from __future__ import annotations

import errno
import gc
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from layerprof.errors import TraceError
from layerprof.pivot.notes import Note
from layerprof.reading import check_decodable, format_size
from layerprof.trace.commargs import MAX_RANKS, rank_id
from layerprof.trace.events import EventCollector, EventTables
from layerprof.trace.stream import Progress, text_chunks
from layerprof.traceformat import EVENTS_KEY

# orjson's parser briefly needs about 12x the text it parses (on top of the
# dicts it returns): 256 KiB batches keep that to a few MB. Smaller ones
# gain little memory; larger ones no speed (measured on HTA's 26 MB trace).
BATCH_BYTES = 1 << 18
_MAX_RETRIES = 16
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
#: The most undecoded text :func:`decode_chunks` holds past a chunk: one event (or the
#: keys after ``traceEvents``) this long is refused (torch's largest are a few KB, and
#: orjson needs about 13x a text to decode it in one piece).
MAX_RECORD = 1 << 26
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
        # Any int: rank_rules takes it only as a rank id, and says so when it is not one.
        return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Decoding allocates millions of containers; the cyclic GC only slows it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_NON_SPACE = re.compile(rb"\S")
_JSON_START = re.compile(rb"\s*(?:\xef\xbb\xbf)?\s*(\S)")
#: consume(events, text): a batch of decoded events and the JSON text they came from.
_Consumer = Callable[[list[Any], Any], None]


def decode(data: bytearray, consume: _Consumer, source: str) -> dict[str, Any]:
    """Feed ``traceEvents`` to ``consume`` in batches; return the other top-level keys."""
    if _NON_SPACE.search(data) is None:
        raise TraceError(f"{source}: empty file")
    with _gc_paused():
        match = _EVENTS_KEY.search(data)
        if match is None:
            return _decode_bare(data, consume, source)
        head, pos = match.start(), match.end()
        pos = _batches(data, pos, consume)
        # The rest of the events plus every other key, as one small document.
        rest: bytes | bytearray = data
        if pos > match.end():
            rest = b"".join((data[:head], b'"traceEvents":[', memoryview(data)[pos:]))
        doc = _loads(rest, source)
        _require_trace(doc, source)
        events = doc.pop(EVENTS_KEY)
        consume(events, rest)
        return dict(doc)


def _decode_bare(data: bytearray, consume: _Consumer, source: str) -> dict[str, Any]:
    """A document without a ``traceEvents`` key: Chrome's bare "JSON Array Format"
    (decoded in batches, as the events of a trace are) or not a trace."""
    opening = _JSON_START.match(data)
    rest: bytes | bytearray = data
    if opening is not None and opening.group(1) == b"[":
        start = opening.end()
        pos = _batches(data, start, consume)
        if pos > start:
            rest = b"".join((b"[", memoryview(data)[pos:]))
    doc = _loads(rest, source)
    if isinstance(doc, list):
        consume(doc, rest)
        return {}
    _require_trace(doc, source)
    return dict(doc)  # pragma: no cover - _require_trace raises


def decode_file(
    path: str | os.PathLike[str],
    consume: _Consumer,
    source: str,
    *,
    limit: int | None = None,
    chunk: int | None = None,
    max_record: int = MAX_RECORD,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """:func:`decode` of a local file as it is read (``trace/stream.py``): memory flat
    in its size; returns the other top-level keys. ``limit``: the input ceiling;
    ``chunk``: bytes of JSON text read at a time; ``max_record``: the most undecoded
    text held past a chunk."""
    with text_chunks(path, source, limit=limit, chunk=chunk, progress=progress) as chunks:
        return decode_chunks(chunks, consume, source, max_record=max_record)


class _Buffer:
    """The undecoded text: what is read is appended, what is decoded dropped."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.data = bytearray()
        self.eof = False
        self.dropped = 0  # bytes of the file's text dropped from the front

    def more(self) -> bool:
        """Append the next chunk; False at the end of the file."""
        piece = next(self.chunks, None)
        if piece is None:
            self.eof = True
            return False
        try:
            self.data += piece
        except BufferError:  # see drop
            self.data = self.data + piece
        return True

    def drop(self, n: int) -> None:
        try:
            del self.data[:n]
        except BufferError:
            # A memoryview of a batch outlived its call: Dask's sampling profiler holds
            # the frames it reads (1 rank in 64 failed so). Go on in a new buffer.
            self.data = self.data[n:]
        self.dropped += n


def decode_chunks(
    chunks: Iterator[bytes], consume: _Consumer, source: str, *, max_record: int = MAX_RECORD
) -> dict[str, Any]:
    """:func:`decode` over text that arrives in chunks; returns the other top-level keys."""
    buf = _Buffer(chunks)
    with _gc_paused():
        found = _front(buf)
        if not buf.eof:
            buf.more()  # a file that fits in what is read by now takes the whole-file path
        opening = _JSON_START.match(buf.data)
        bare = found is None and opening is not None and opening.group(1) == b"["
        if buf.eof or not (found or bare):
            while buf.more():  # neither a keyed trace nor a bare array: decode says what
                pass
            return decode(buf.data, consume, source)
        if found is not None:
            head, start = bytes(buf.data[: found.start()]) + b'"traceEvents":[', found.end()
        else:
            assert opening is not None  # bare
            head, start = b"[", opening.end()
        buf.drop(start - 1)  # keep the array's "[": a batch is parsed in place over it
        _events(buf, consume, source, max_record)
        rest = head + bytes(buf.data[1:])
        buf.drop(len(buf.data))
        doc = _loads(rest, source)
        if bare and isinstance(doc, list):
            consume(doc, rest)
            return {}
        _require_trace(doc, source)
        events = doc.pop(EVENTS_KEY)
        consume(events, rest)
        return dict(doc)


def _front(buf: _Buffer) -> re.Match[bytes] | None:
    """Read until the ``traceEvents`` key is found (its match), the text opens with
    something other than an object (None), or the file ends (None)."""
    while True:
        found = _EVENTS_KEY.search(buf.data)
        if found is not None:
            return found
        opening = _JSON_START.match(buf.data)
        if opening is not None and opening.group(1) != b"{":
            return None
        if not buf.more():
            return None


def _events(buf: _Buffer, consume: _Consumer, source: str, max_record: int) -> None:
    """Decode and drop whole batches until the file ends; ``buf.data[0]`` is the byte
    before the unread events (``[`` or a separator) on entry and on return.

    When every boundary the cut tries fails to parse, the text is not JSON as it
    stands (torch's unescaped quotes): the next try requotes its batch, as
    :func:`decode` requotes the rest it cannot parse."""
    requote = False
    while True:
        pos = _batches(buf.data, 1, consume, requote=requote)
        if pos > 1:
            buf.drop(pos - 1)
            requote = False
        else:
            requote = _tried_all(buf.data)
        if len(buf.data) > max_record + BATCH_BYTES:
            raise TraceError(
                f"{source}: no event ends within {format_size(max_record)} of text from"
                f" byte {buf.dropped:,} of its JSON (one event, or the keys after"
                " traceEvents, this large is not a trace torch writes; or the text there"
                " is not JSON)"
            )
        if not buf.more():
            return


def _tried_all(data: bytearray) -> bool:
    """Whether the cut had every boundary it tries: failing there means the text does
    not parse as it is, not that more of the file is needed."""
    found = _BOUNDARY.finditer(data, 1 + BATCH_BYTES)
    return sum(1 for _ in islice(found, _MAX_RETRIES)) >= _MAX_RETRIES


def _batches(data: bytearray, pos: int, consume: _Consumer, *, requote: bool = False) -> int:
    """Consume whole batches from ``pos``; return where the unread events start.

    ``data[pos - 1]`` is the array's ``[`` or a separator byte, and so is the
    byte after a boundary's ``}``: writing ``[`` and ``]`` there turns the
    batch into a JSON array in place, parsed from a memoryview without a copy.
    ``requote``: the first batch may be parsed :func:`requoted` where it is not JSON
    as it stands (:func:`decode_chunks`, which never holds the whole rest to requote).
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
                    batch = _parsed(view[pos - 1 : end + 1], requote)
                except orjson.JSONDecodeError:
                    continue  # the boundary was inside a nested value or string
                finally:
                    data[pos - 1], data[end] = saved
                requote = False
                with view[pos - 1 : end + 1] as text:
                    consume(batch, text)
                del batch
                pos = found.end() - 1
                break
            else:
                return pos
        return pos
    finally:
        view.release()


def _parsed(text: memoryview, requote: bool) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        if not requote:
            raise
        return orjson.loads(requoted(text))


def _loads(data: bytes | bytearray, source: str) -> Any:
    check_decodable(len(data), source, error=TraceError)  # orjson crashes out of memory
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        try:  # torch's own export leaves quotes in names unescaped
            return orjson.loads(requoted(data))
        except orjson.JSONDecodeError:
            raise TraceError(f"{source}: not valid JSON ({exc})") from exc


# torch writes each string field on a line of its own, ``"key": "value",``, and puts
# the value in unescaped: a module path ``say "hi"`` makes the file invalid JSON.
_STRING_LINE = re.compile(rb'^([ \t]*"[^"\\\n]+": ")(.*)("[ \t]*,?[ \t]*)$', re.MULTILINE)
_BARE_QUOTE = re.compile(rb'(?<!\\)"')
# torch <= 2.12 writes an event's head on one line: "ph": "X", "cat": "...", "name":
# "...", "pid": ...; the name is what lies between its key and the line's last ", "pid":
_NAME_BEFORE_PID = re.compile(rb'("name": ")([^\n]*)(", "pid": )')


def requoted(data: bytes | bytearray | memoryview) -> bytes:
    """``data`` with the quotes inside each line's one string value escaped, as torch's
    Chrome-trace export should have written them (the whole value is what lies
    between the key and the line's last quote, so a name holding ``", "ph": "i``
    stays one name; torch 2.11's lines holding several keys: the name is what lies
    before the line's last ``", "pid": ``). Applied only to text that is not JSON as
    it stands."""
    return _NAME_BEFORE_PID.sub(_requoted_line, _STRING_LINE.sub(_requoted_line, bytes(data)))


def _requoted_line(line: re.Match[bytes]) -> bytes:
    key, value, end = line.groups()
    return key + _BARE_QUOTE.sub(rb'\\"', value) + end


class NotATraceError(TraceError):
    """Valid JSON, but not a trace (a saved profile, a config): a directory skips it."""


def _require_trace(doc: Any, source: str) -> None:
    if not isinstance(doc, dict) or not isinstance(doc.get(EVENTS_KEY), list):
        raise NotATraceError(
            f"{source}: not a Chrome/Kineto trace (no 'traceEvents' list)",
            hint="export one with torch.profiler: prof.export_chrome_trace('trace.json')",
        )


def read_trace_file(
    path: str | os.PathLike[str],
    *,
    keep_shapes: bool = False,
    max_input_size: int | None = None,
    data: bytearray | None = None,
    name: str | None = None,
    progress: Progress | None = None,
) -> TraceFile:
    """Decode one ``.json`` / ``.json.gz`` trace into typed tables.

    ``max_input_size``: the ceiling on its JSON size (see ``layerprof.reading``);
    ``data``: its bytes when already read (a pipe can be read only once, a
    remote file is read by ``trace/jobs/remote.py``); without it the file is decoded
    as it is read, in memory flat in its size (``trace/stream.py``); ``name``:
    what errors call it (default: the path); ``progress(read, size)``: the bytes
    of the file read so far, and its size when known.
    """
    p = Path(path)
    source = name or str(p)
    collector = EventCollector(keep_shapes=keep_shapes)
    if data is None:
        header = decode_file(
            p, collector.add_batch, source, limit=max_input_size, progress=progress
        )
    else:
        header = decode(data, collector.add_batch, source)
    del data
    tables = collector.finish()
    if len(tables.host) == 0 and len(tables.device) == 0:
        raise TraceError(
            f"{source}: empty trace (no CPU or GPU spans among {tables.events} events)"
        )
    return TraceFile(path=p, header=header, tables=tables)


def trace_files(path: str | os.PathLike[str]) -> list[Path]:
    """The trace files a path names: itself, or a directory's ``*.json[.gz]``."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"{p}: no such file or directory")
    if p.is_dir():
        # Every name that looks like a trace, whatever it is: one that cannot be read (a
        # dangling link, a FIFO) fails with why, never drops out of the ranks unseen.
        files = sorted(f for f in p.iterdir() if f.name.endswith(TRACE_SUFFIXES))
        if not files:
            raise TraceError(f"{p}: directory holds no .json or .json.gz trace files")
        return files
    return [p]


def unreadable(path: str | os.PathLike[str]) -> str | None:
    """Why a file listed from a directory or glob cannot be a trace, checked without
    opening it (opening a FIFO waits for a writer); None for a regular file."""
    try:
        mode = os.stat(path).st_mode  # follows links: what a read would open
    except FileNotFoundError:
        if os.path.islink(path):
            return f"a dangling symbolic link (to {os.readlink(path)})"
        return "no such file (removed while the traces were listed)"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        return f"cannot read ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    kinds = {
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO (named pipe)",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    kind = next((name for test, name in kinds.items() if test(mode)), "not a file")
    return f"{kind}, not a regular file"


@dataclass(frozen=True)
class Ranks:
    """The rank of each file, how it was found, and what went wrong on the way."""

    ranks: tuple[int, ...]
    source: str  # "distributedInfo.rank" (or another claim) | "file name (rank-N / rank_N)" | "file order"
    notes: tuple[Note, ...] = ()


def rank_rules(
    names: list[str], distributed: list[int | None], claim: str = "distributedInfo.rank"
) -> Ranks:
    """Rank of each file (by the rank it claims, ``distributedInfo.rank`` for a
    trace, and by its name) and how it was found (the report says which).

    Two files claiming one rank cannot both have it: the next rule is used
    (file name, then file order), and a note names the files that collided.
    """
    notes: list[Note] = []
    claimed = [rank_id(r) for r in distributed]
    bad = [(n, r) for n, r, ok in zip(names, distributed, claimed, strict=True) if r != ok]
    if bad:
        more = f" (and {len(bad) - 1} more files)" if len(bad) > 1 else ""
        notes.append(
            Note(
                "bad-rank-claim",
                f"{bad[0][0]}{more} claims rank {bad[0][1]} ({claim}), which is not a rank id"
                f" (0 to {MAX_RANKS - 1}); ranks were not taken from it",
                {"file": bad[0][0], "rank": bad[0][1], "files": len(bad)},
            )
        )
    rules = (
        (claim, claimed),
        ("file name (rank-N / rank_N)", [_rank_from_name(_base(n)) for n in names]),
    )
    for source, found in rules:
        if any(r is None for r in found):
            continue
        clash = _first_clash(names, found)
        if clash is None:
            return Ranks(tuple(r for r in found if r is not None), source, tuple(notes))
        text = f"{clash[0]} and {clash[1]} both claim rank {clash[2]} ({source})"
        notes.append(
            Note(
                "rank-clash",
                text + "; ranks were not taken from it",
                {"files": clash[:2], "rank": clash[2], "rule": source},
            )
        )
    return Ranks(tuple(range(len(names))), "file order", tuple(notes))


def _base(name: str) -> str:
    """The last part of a path or URL (the rank is read from the file's own name)."""
    return name.rstrip("/").rsplit("/", 1)[-1]


def _first_clash(names: list[str], ranks: list[int | None]) -> tuple[str, str, int | None] | None:
    """The first two files that claim one rank, and the rank."""
    seen: dict[int | None, str] = {}
    for name, r in zip(names, ranks, strict=True):
        if r in seen:
            return seen[r], name, r
        seen[r] = name
    return None


def _rank_from_name(name: str) -> int | None:
    m = _RANK_IN_NAME.search(name)
    digits = m.group(1) if m else ""
    # More digits than any C int has: not a rank (and int() of a long string is slow).
    return rank_id(int(digits)) if 0 < len(digits) <= 10 else None
