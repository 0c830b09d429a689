"""Input files read whole into one buffer, never past a size ceiling.

Every JSON file a user hands to layerprof (traces, saved profiles, trace
analyses, diffs) is read here, so one rule bounds them all:

* the ceiling applies to the bytes after decompression; the default is the
  smaller of 16 GiB and half the memory available now (reading and decoding
  a trace takes up to about twice its JSON size), and ``--max-input-size``
  (``limit=`` here) sets another;
* a regular file is read into one buffer of its size (``readinto``: no
  second copy); gzip (found by its magic bytes, never the name) is inflated
  256 KiB at a time into one buffer sized from the gzip trailer when that is
  plausible; pipes, FIFOs and devices are read in chunks, with the same
  ceiling;
* the first bytes must open gzip or a JSON value, so ``/dev/zero`` or
  a binary file fails at once instead of after gigabytes;
* JSON text decoded in one piece must fit the memory left at the worst cost
  per byte (:func:`check_decodable`): orjson crashes instead of raising when
  an allocation fails (under ``ulimit -v``), so a gzip bomb that fits the
  ceiling must still not reach it.
"""

from __future__ import annotations

import os
import re
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from io import BufferedReader
from pathlib import Path
from typing import Any, BinaryIO

from layerprof.errors import LayerprofError
from layerprof.machine import available_memory

CHUNK = 1 << 18  # bytes appended at a time (inflated output, pipe reads)
_HEAD = 1 << 16  # read first, to sniff gzip / JSON before sizing the buffer
_GZIP_READ = 1 << 18  # compressed bytes per read: small, so each inflate step stays small
_MAX_DEFAULT = 16 << 30
_GZIP_MAGIC = b"\x1f\x8b"
# A gzip trailer's size field is trusted for preallocation only up to this
# ratio (JSON traces compress 10-30x): a lying trailer cannot make us
# allocate more than this many times the file.
_PLAUSIBLE_RATIO = 128
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_JSON_START = re.compile(rb"\s*(?:\xef\xbb\xbf)?\s*(\S)")
_JSON_FIRST = frozenset(bytes([c]) for c in b'{["-0123456789tfn')
#: orjson's peak memory while parsing, per byte of the text, at worst (measured with
#: orjson 3.8: numbers 12x, trace events 13x, a string 1x, nested empty arrays 45x).
DECODE_FACTOR = 48
#: Text decoded in one piece below this size is not checked (48 MiB at worst).
_CHECK_FROM = 1 << 20


def parse_size(text: str) -> int:
    """``"64G"`` -> bytes (K, M, G, T are powers of 1024; a bare number is bytes)."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size (e.g. 512M, 64G)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return value


def format_size(n: int) -> str:
    """Bytes as the largest whole-ish binary unit: ``17179869184`` -> ``16.0 GiB``."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def default_limit() -> int:
    """16 GiB, or half the memory available now when that is less."""
    room = available_memory()
    return _MAX_DEFAULT if not room else max(min(_MAX_DEFAULT, room // 2), CHUNK)


def read_input(
    path: str | os.PathLike[str],
    *,
    limit: int | None = None,
    error: type[LayerprofError] = LayerprofError,
) -> bytearray:
    """The file's bytes, gunzipped when gzip; ``error`` (one line) for anything wrong.

    ``limit``: the ceiling in bytes after decompression (None: :func:`default_limit`).
    """
    p = Path(path)
    ceiling = default_limit() if limit is None else limit
    with read_errors(str(p), ceiling, error), p.open("rb") as handle:
        info = os.fstat(handle.fileno())
        size = info.st_size if stat.S_ISREG(info.st_mode) else None
        return _Reader(handle, str(p), ceiling, error, size).read()


@contextmanager
def read_errors(name: str, ceiling: int, error: type[LayerprofError]) -> Iterator[None]:
    """The OS's errors while ``name`` is opened and read, as one-line ``error``s naming
    it (``read_input`` and the chunked trace reader, ``trace/stream.py``)."""
    try:
        yield
    except FileNotFoundError as exc:
        raise error(f"{name}: no such file") from exc
    except IsADirectoryError as exc:
        raise error(f"{name}: is a directory") from exc
    except OSError as exc:
        raise error(f"{name}: cannot read ({exc.strerror or exc})") from exc
    except MemoryError as exc:
        raise error(
            f"{name}: out of memory while reading it (limit {format_size(ceiling)})",
            hint="free memory, or read a smaller trace",
        ) from exc


def read_stream(
    handle: BinaryIO,
    name: str,
    *,
    size: int | None,
    limit: int | None = None,
    error: type[LayerprofError] = LayerprofError,
) -> bytearray:
    """An open binary stream's bytes (a remote file), with :func:`read_input`'s rules:
    gunzipped when gzip, never past ``limit``; ``size`` is its length when known.
    ``name`` names it in errors (a URL without its credentials)."""
    ceiling = default_limit() if limit is None else limit
    try:
        return _Reader(handle, name, ceiling, error, size).read()
    except MemoryError as exc:
        raise error(
            f"{name}: out of memory while reading it (limit {format_size(ceiling)})",
            hint="free memory, or read a smaller trace",
        ) from exc


class _Reader:
    """One read of one open file (a plain mutable helper, never exposed)."""

    def __init__(
        self,
        handle: BinaryIO | BufferedReader,
        path: str,
        ceiling: int,
        error: type[LayerprofError],
        size: int | None,
    ) -> None:
        self.handle, self.path, self.ceiling, self.error = handle, path, ceiling, error
        self.size = size
        self.gzip = False

    def read(self) -> bytearray:
        first = self.handle.read(_HEAD)
        if first[:2] == _GZIP_MAGIC:
            self.gzip = True
            return self._gunzip(first)
        self._sniff(first)
        if self.size is not None and self.size > self.ceiling:
            raise self._too_large()
        out = bytearray(max(self.size or 0, len(first)))
        out[: len(first)] = first
        n = len(first)
        readinto = getattr(self.handle, "readinto", None)  # remote streams may lack it
        with memoryview(out) as view:
            while readinto is not None and n < len(out) and (got := readinto(view[n:])):
                n += got
        del out[n:]  # the file shrank while we read it: keep what is there
        for chunk in self._chunks():  # it grew, or it is a pipe / device
            n = self._append(out, n, chunk)
        return out

    def _chunks(self, size: int = CHUNK) -> Iterator[bytes]:
        while chunk := self.handle.read(size):
            yield chunk

    def _append(self, out: bytearray, n: int, piece: bytes) -> int:
        end = n + len(piece)
        if end > self.ceiling:
            raise self._too_large()
        out[n:end] = piece  # overwrites preallocated room, or grows the buffer
        return end

    def _gunzip(self, first: bytes) -> bytearray:
        out = bytearray(self._gzip_size_hint())
        n = 0
        inflater = zlib.decompressobj(wbits=31)
        sniffed = False
        try:
            for data in _prepend(first, self._chunks(_GZIP_READ)):
                while True:
                    if inflater.eof:  # another gzip member follows, or trailing junk
                        if data[:2] != _GZIP_MAGIC:
                            break
                        inflater = zlib.decompressobj(wbits=31)
                    piece = inflater.decompress(data, CHUNK)
                    if not sniffed and piece:
                        self._sniff(piece)
                        sniffed = True
                    n = self._append(out, n, piece)
                    data = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
                    if not data and len(piece) < CHUNK:
                        break
        except zlib.error as exc:
            raise self.error(f"{self.path}: corrupt gzip ({exc})") from exc
        if not inflater.eof:
            raise self.error(f"{self.path}: truncated gzip (the file ends mid-stream)")
        del out[n:]
        return out

    def _gzip_size_hint(self) -> int:
        """The trailer's uncompressed size (mod 4 GiB) when plausible, else 0."""
        if self.size is None or self.size < 18:
            return 0
        try:
            here = self.handle.tell()
            try:
                self.handle.seek(-4, os.SEEK_END)
                hint = int.from_bytes(self.handle.read(4), "little")
            finally:
                self.handle.seek(here)
        except (OSError, ValueError):  # a stream that cannot seek: no hint
            return 0
        return hint if hint <= min(self.ceiling, self.size * _PLAUSIBLE_RATIO) else 0

    def _sniff(self, head: bytes) -> None:
        """JSON text starts with a value (after blanks): fail early on anything else."""
        m = _JSON_START.match(head)
        if m is not None and m.group(1) not in _JSON_FIRST:
            raise self.error(f"{self.path}: not JSON or gzip (it starts with {bytes(head[:8])!r})")

    def _too_large(self) -> LayerprofError:
        what = "expands past" if self.gzip else "is larger than"
        suggestion = max((2 * self.ceiling) >> 30, 1)
        return self.error(
            f"{self.path}: {what} the input size limit of {format_size(self.ceiling)};"
            f" raise it with --max-input-size, e.g. --max-input-size {suggestion}G"
        )


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def check_decodable(size: int, name: str, *, error: type[LayerprofError] = LayerprofError) -> None:
    """``error`` (one line naming ``name``) when decoding ``size`` bytes of JSON in one
    piece could need more memory than this process may still allocate.

    orjson does not raise when an allocation fails: it crashes (SIGSEGV; seen with a
    3 MB gzip expanding to 3 GB under a memory limit). So the worst case is checked
    before it is called, not caught after."""
    if size < _CHECK_FROM:
        return
    room = available_memory()
    need = size * DECODE_FACTOR
    if room is not None and need > room:
        raise error(
            f"{name}: decoding its {format_size(size)} of JSON in one piece could need"
            f" up to {format_size(need)}, more than the {format_size(room)} this process"
            " may still allocate",
            hint="free memory or raise the memory limit; a trace's events are decoded in"
            " batches, so a file that needs this much is not one as torch writes it",
        )


def read_json(
    path: str | os.PathLike[str],
    *,
    max_input_size: int | None = None,
    error: type[LayerprofError] = LayerprofError,
) -> Any:
    """A JSON file's value (gzip or not), read within the input size ceiling; ``error``
    (one line naming the file) when it cannot be read or is not JSON."""
    import orjson

    p = Path(path)
    data = read_input(p, limit=max_input_size, error=error)
    check_decodable(len(data), str(p), error=error)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise error(f"{p}: not JSON ({exc})") from exc
