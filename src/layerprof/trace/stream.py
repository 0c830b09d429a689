"""A trace file's JSON text read in chunks: what keeps decoding flat in memory.

``reading.read_input`` holds a whole file (its text after gunzip) in one buffer.
Here the file (plain or gzip) is handed out :data:`CHUNK_BYTES` of JSON text at
a time, for ``reader.decode_chunks`` to cut into batches, decode and drop. The
rules and messages are ``reading``'s: the first bytes must open gzip or JSON,
the input ceiling (``reading.default_limit``, ``--max-input-size``) counts every
byte of text as it is inflated (a gzip bomb stops there), a truncated or corrupt
gzip fails in one line.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from layerprof.errors import TraceError
from layerprof.reading import default_limit, format_size, read_errors

#: JSON text read and appended to the buffer at a time. Measured reading the 0.82 GB
#: big_trace.py copy (4.36M events) into tables, two runs each: 4 MiB 10.1-10.4 s,
#: 16 MiB 9.2-9.6 s, 64 MiB 9.7-10.1 s, all at a 0.47 GB peak (the tables, not the
#: buffer); 16 MiB keeps the buffer small next to them.
CHUNK_BYTES = 1 << 24
_HEAD = 1 << 16
_GZIP_READ = 1 << 18  # compressed bytes per read
_GZIP_MAGIC = b"\x1f\x8b"
_JSON_FIRST = frozenset(b'{["-0123456789tfn')
#: progress(bytes of the file read so far, the file's size or None)
Progress = Callable[[int, int | None], None]


class TextChunks:
    """The JSON text of one open file, gunzipped when gzip, ``chunk`` bytes at a time,
    never past ``ceiling`` bytes of text (``reading``'s rules and messages)."""

    def __init__(
        self,
        handle: BinaryIO,
        name: str,
        *,
        ceiling: int,
        size: int | None = None,
        chunk: int = CHUNK_BYTES,
        progress: Progress | None = None,
    ) -> None:
        self.handle, self.name, self.ceiling, self.size = handle, name, ceiling, size
        self.chunk = max(chunk, 1)
        self.progress = progress
        self.gzip = False
        self.text_bytes = 0  # JSON text handed out so far
        self.file_bytes = 0  # bytes read from the file so far

    def __iter__(self) -> Iterator[bytes]:
        first = self._read(_HEAD)
        if first[:2] == _GZIP_MAGIC:
            self.gzip = True
            yield from self._gunzip(first)
            return
        if self.size is not None and self.size > self.ceiling:
            raise self._too_large()
        piece = first
        while piece:
            yield from self._counted(piece)
            piece = self._read(self.chunk)

    def _read(self, n: int) -> bytes:
        piece = self.handle.read(n)
        self.file_bytes += len(piece)
        if self.progress is not None:
            self.progress(self.file_bytes, self.size)
        return piece

    def _counted(self, piece: bytes) -> Iterator[bytes]:
        if self.text_bytes == 0:
            self._sniff(piece)
        self.text_bytes += len(piece)
        if self.text_bytes > self.ceiling:
            raise self._too_large()
        # A chunk read whole is handed out whole; a larger piece (the first read of a
        # test's tiny chunk) is cut, so a test's chunk size is what the decoder sees.
        for start in range(0, len(piece), self.chunk):
            yield piece[start : start + self.chunk]

    def _gunzip(self, first: bytes) -> Iterator[bytes]:
        """``reading``'s inflate loop, handing each piece out as it comes."""
        inflater = zlib.decompressobj(wbits=31)
        data = first
        try:
            while data:
                while True:
                    if inflater.eof:  # another gzip member follows, or trailing junk
                        if data[:2] != _GZIP_MAGIC:
                            break
                        inflater = zlib.decompressobj(wbits=31)
                    piece = inflater.decompress(data, self.chunk)
                    if piece:
                        yield from self._counted(piece)
                    data = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
                    if not data and len(piece) < self.chunk:
                        break
                data = self._read(_GZIP_READ)
        except zlib.error as exc:
            raise TraceError(f"{self.name}: corrupt gzip ({exc})") from exc
        if not inflater.eof:
            raise TraceError(f"{self.name}: truncated gzip (the file ends mid-stream)")

    def _sniff(self, head: bytes) -> None:
        """JSON text starts with a value (after blanks): fail early on anything else."""
        stripped = head.lstrip().removeprefix(b"\xef\xbb\xbf").lstrip()
        if stripped and stripped[0] not in _JSON_FIRST:
            raise TraceError(f"{self.name}: not JSON or gzip (it starts with {head[:8]!r})")

    def _too_large(self) -> TraceError:
        what = "expands past" if self.gzip else "is larger than"
        suggestion = max((2 * self.ceiling) >> 30, 1)
        return TraceError(
            f"{self.name}: {what} the input size limit of {format_size(self.ceiling)};"
            f" raise it with --max-input-size, e.g. --max-input-size {suggestion}G"
        )


@contextmanager
def text_chunks(
    path: str | os.PathLike[str],
    source: str,
    *,
    limit: int | None = None,
    chunk: int | None = None,
    progress: Progress | None = None,
) -> Iterator[Iterator[bytes]]:
    """A local file's JSON text in chunks (:class:`TextChunks`), opened for the
    ``with`` block; errors name ``source`` in one line, as ``reading.read_input``'s do.
    ``chunk``: bytes of text at a time (default :data:`CHUNK_BYTES`)."""
    p = Path(path)
    ceiling = default_limit() if limit is None else limit
    with read_errors(source, ceiling, TraceError), p.open("rb") as handle:
        info = os.fstat(handle.fileno())
        size = info.st_size if stat.S_ISREG(info.st_mode) else None
        yield iter(
            TextChunks(
                handle,
                source,
                ceiling=ceiling,
                size=size,
                chunk=CHUNK_BYTES if chunk is None else chunk,
                progress=progress,
            )
        )
