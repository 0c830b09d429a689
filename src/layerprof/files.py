"""Writing output files whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from layerprof.errors import OutputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def ensure_parent(path: str | os.PathLike[str], *, is_dir: bool = False) -> Path:
    """Create the folder ``path`` will be written in (or ``path`` itself for a
    directory output) and check it is writable: called before a long run, so a
    typo in an output path fails in a second, not after the measurement."""
    target = Path(path)
    folder = target if is_dir else target.parent
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"cannot write {target}: {parent} is not a directory")
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from exc
    if not os.access(folder, os.W_OK):
        raise OutputError(f"cannot write {target}: {folder} is not writable")
    if target.is_dir() and not is_dir:
        raise OutputError(f"cannot write {target}: it is a directory")
    return target


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write ``data`` to ``path`` via a temporary file and a rename.

    A crash or an error half-way leaves no partial file behind. Missing parent
    directories are created.
    """
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    ensure_parent(target)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        # mkstemp makes the file private (0600); give it the usual umask-based mode.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from exc
        raise
    return target
