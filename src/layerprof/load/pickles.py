"""What a pickle stream asks to import, read without unpickling it.

When ``torch.load(weights_only=True)`` refuses a file, the user must learn
whether it was refused for safety (it names code: ``builtins.eval``,
``posix.system``, a model class) or is damaged (cut short, not a pickle). Its
error text does not say reliably (``GLOBAL eval``, or an unsupported opcode for
protocol 4), so the stream is walked with :func:`pickletools.genops`, which
decodes opcodes and runs nothing, collecting every ``GLOBAL`` /
``STACK_GLOBAL`` name. Pure Python; only :func:`refused_globals` asks torch
for its allow-list.
"""

from __future__ import annotations

import io
import pickletools
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_PICKLE_BYTES", "PickleScan", "refused_globals", "scan_stream", "scan_torch_file"]

MAX_PICKLE_BYTES = 256 * 2**20
# A legacy torch.save file is five pickles (magic, protocol, sys info, data,
# storage keys) followed by raw storage bytes.
_LEGACY_PICKLES = 5
_STRING_OPS = frozenset(
    {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING",
     "BINSTRING", "STRING"}
)  # fmt: skip
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})


@dataclass(frozen=True)
class PickleScan:
    """The globals a stream names, in order, and whether it decoded to its end
    (False: cut short or not a pickle, i.e. damaged)."""

    globals: tuple[str, ...]
    complete: bool


def scan_torch_file(file: Path) -> PickleScan:
    """Scan a ``torch.save`` file: the ``data.pkl`` of a zip, else the legacy stream."""
    try:
        if zipfile.is_zipfile(file):
            return _scan_zip(file)
        with file.open("rb") as handle:
            data = handle.read(MAX_PICKLE_BYTES)
    except (OSError, zipfile.BadZipFile):
        return PickleScan((), complete=False)
    return scan_stream(data, pickles=_LEGACY_PICKLES)


def _scan_zip(file: Path) -> PickleScan:
    with zipfile.ZipFile(file) as archive:
        name = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
        if name is None:
            return PickleScan((), complete=False)
        info = archive.getinfo(name)
        if info.file_size > MAX_PICKLE_BYTES:
            return PickleScan((), complete=False)
        with archive.open(info) as handle:
            return scan_stream(handle.read(MAX_PICKLE_BYTES), pickles=1)


def scan_stream(data: bytes, *, pickles: int = 1) -> PickleScan:
    """Globals named by up to ``pickles`` consecutive pickles at the start of ``data``.

    Complete when each of them decodes to its STOP or the data ends between two
    of them (a plain pickle is one; raw tensor bytes follow a legacy file's five).
    """
    stream = io.BytesIO(data)
    names: list[str] = []
    for _ in range(pickles):
        if stream.tell() >= len(data):
            break
        try:
            _globals_of_one(stream, names)
        except (ValueError, EOFError, KeyError, IndexError, TypeError):
            return PickleScan(tuple(names), complete=False)
    return PickleScan(tuple(names), complete=True)


def _globals_of_one(stream: io.BytesIO, names: list[str]) -> None:
    """Add the globals of the pickle at the stream's position to ``names`` (also
    those before a point where it breaks off); leaves the stream after its STOP.

    ``STACK_GLOBAL`` takes module and name from the two values pushed before it
    (strings, or memo entries holding them), so pushes are tracked: a string's
    value, ``None`` for anything else.
    """
    pushed: list[object] = []
    memo: dict[int, object] = {}
    for opcode, arg, _ in pickletools.genops(stream):
        op = opcode.name
        value: object = None
        if op in ("GLOBAL", "INST"):
            names.append(_dotted(*str(arg).split(" ", 1)))
        elif op == "STACK_GLOBAL":
            names.append(_dotted(*(["?", "?", *pushed])[-2:]))
        elif op in _STRING_OPS:
            value = arg.decode("latin-1") if isinstance(arg, bytes) else arg
        elif op in _PUT_OPS:
            memo[int(str(arg))] = pushed[-1] if pushed else None
        elif op == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
        elif op in _GET_OPS:
            value = memo.get(int(str(arg)))
        if opcode.stack_after and opcode.stack_after != opcode.stack_before:
            pushed = [*pushed[-1:], value]
        if op == "STOP":
            break


def _dotted(module: object, name: object) -> str:
    # Protocols 0-2 spell builtins the Python 2 way; pickle maps it back on load.
    return f"{'builtins' if module == '__builtin__' else module}.{name}"


def refused_globals(scan: PickleScan) -> list[str]:
    """The globals of ``scan`` that ``torch.load(weights_only=True)`` does not allow
    (its built-in allow-list plus ``torch.serialization.add_safe_globals``)."""
    try:
        from torch._weights_only_unpickler import (
            _get_allowed_globals,
            _get_user_allowed_globals,
        )

        allowed = set(_get_allowed_globals()) | set(_get_user_allowed_globals())  # type: ignore[no-untyped-call]
    except ImportError:  # a torch without these helpers: name every global
        allowed = set()
    return [name for name in scan.globals if name not in allowed]
