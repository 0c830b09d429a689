"""Writing output files whole or not at all, without harming what the path names.

What an output path may be, and what writing it does:

* ``-``: standard output;
* a new path: a temporary file next to it, renamed into place (missing parent
  directories are created), mode ``0666 & ~umask``;
* an existing regular file: replaced the same way, keeping its mode and owner;
  refused when it is not writable (as the shell's ``>`` would);
* a symbolic link: followed; its target is written as above, next to the target,
  and the link stays a link;
* a regular file with other hard links, or one whose owner cannot be kept:
  rewritten in place (every name sees the new data; not atomic);
* a FIFO or character device, or the name of an open stream (``/dev/stdout``,
  ``/dev/fd/3``, ``>(jq .)``, ``/proc/self/fd/1``): written in place, never renamed;
* a directory, block device or socket: refused.

Only a temporary file this module created is ever renamed, and only over the
regular file it checked (same inode) or over nothing.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from layerprof.errors import OutputError

#: The output path that means standard output.
STDOUT = "-"
# Names of streams that are already open (/dev/stdout, /dev/fd/3, /proc/self/fd/1):
# the file behind them must be written through them, never replaced.
_STREAM_PATHS = ("/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def is_stdout(path: str | os.PathLike[str]) -> bool:
    return os.fspath(path) == STDOUT


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


def check_writable(path: str | os.PathLike[str]) -> None:
    """Fail now, as :func:`write_atomic` would later, if ``path`` cannot be written."""
    plan = _plan(Path(path))
    if plan.how == "replace":
        ensure_parent(plan.real)


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write ``data`` to ``path`` whole or not at all, following the rules above.

    Returns the path written (``Path("-")`` for standard output).
    """
    payload = data.encode() if isinstance(data, str) else data
    target = Path(path)
    plan = _plan(target)
    if plan.how == "stdout":
        _write_stdout(payload)
    elif plan.how == "in-place":
        _write_in_place(target, payload)
    else:
        _replace(target, plan, payload)
    return target


# ------------------------------------------------------------------ planning


@dataclass(frozen=True)
class _Plan:
    how: Literal["stdout", "in-place", "replace"]
    real: Path  # the file that gets written (a symlink's target)
    existing: os.stat_result | None = None  # the regular file replaced, if any


def _plan(target: Path) -> _Plan:
    if is_stdout(target):
        return _Plan("stdout", target)
    try:
        st = os.stat(target)  # follows symlinks: what the path names
    except (FileNotFoundError, NotADirectoryError):
        # new (or a dangling link); ensure_parent says what is wrong with its folder
        return _Plan("replace", Path(os.path.realpath(target)))
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from exc
    return plan_existing(target, st)


def plan_existing(target: Path, st: os.stat_result) -> _Plan:
    """How to write over an existing ``target`` whose (followed) status is ``st``."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise OutputError(f"cannot write {target}: it is a directory")
    if stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        kind = "a block device" if stat.S_ISBLK(mode) else "a socket"
        raise OutputError(f"cannot write {target}: it is {kind}")
    if not os.access(target, os.W_OK):
        raise OutputError(f"cannot write {target}: permission denied")
    if not stat.S_ISREG(mode) or str(target.absolute()).startswith(_STREAM_PATHS):
        return _Plan("in-place", target)  # a FIFO, terminal or open stream
    if st.st_nlink > 1:
        return _Plan("in-place", target)  # replacing would break the other links
    return _Plan("replace", Path(os.path.realpath(target)), st)


# ------------------------------------------------------------------- writing


def _write_stdout(payload: bytes) -> None:
    out = sys.stdout
    buffer = getattr(out, "buffer", None)
    try:
        out.flush()
        if buffer is not None:
            buffer.write(payload)
            buffer.flush()
        else:  # a text-only stream (pytest's capsys, an IDE console)
            out.write(payload.decode("utf-8", errors="replace"))
            out.flush()
    except OSError as exc:
        raise OutputError(f"cannot write to standard output: {exc.strerror or exc}") from exc


def _write_in_place(target: Path, payload: bytes) -> None:
    try:
        with open(target, "wb") as handle:
            handle.write(payload)
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from exc


def _replace(target: Path, plan: _Plan, payload: bytes) -> None:
    real = plan.real
    if plan.existing is None:
        ensure_parent(real)
    held = _hold_signals()  # Ctrl-C or SIGTERM between creating it and the try: a stray file
    try:
        fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".tmp")
    except OSError as exc:
        _release_signals(held)
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from exc
    try:
        _release_signals(held)  # an interrupt from here on removes the file below
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        if not _take_attributes(tmp, plan.existing):
            # The owner cannot be kept (another user's file we may write): write in place.
            Path(tmp).unlink()
            _write_in_place(target, payload)
            return
        _check_unchanged(real, plan.existing)
        os.replace(tmp, real)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from exc
        raise


_HELD = (signal.SIGINT, signal.SIGTERM)


def _hold_signals() -> set[int | signal.Signals] | None:
    """Block Ctrl-C and SIGTERM in this thread (they wait, pending); the mask to restore,
    or None where threads cannot mask signals."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)


def _release_signals(held: set[int | signal.Signals] | None) -> None:
    """Restore the mask: a signal that came meanwhile is delivered now, and raises here."""
    if held is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _take_attributes(tmp: str, existing: os.stat_result | None) -> bool:
    """Give the temporary file the mode (and owner) the replaced file had; False when
    the owner cannot be kept."""
    if existing is None:
        # mkstemp makes the file private (0600); give it the usual umask-based mode.
        os.chmod(tmp, 0o666 & ~_umask())
        return True
    mine = os.stat(tmp)
    if (mine.st_uid, mine.st_gid) != (existing.st_uid, existing.st_gid):
        try:
            os.chown(tmp, existing.st_uid, existing.st_gid)
        except PermissionError:
            return False
    os.chmod(tmp, stat.S_IMODE(existing.st_mode))
    return True


def _check_unchanged(real: Path, existing: os.stat_result | None) -> None:
    """Rename only over the file that was checked, or over nothing."""
    try:
        now = os.lstat(real)
    except FileNotFoundError:
        now = None
    if existing is None:
        same = now is None
    else:
        same = (
            now is not None
            and stat.S_ISREG(now.st_mode)
            and (now.st_dev, now.st_ino) == (existing.st_dev, existing.st_ino)
        )
    if not same:
        raise OutputError(f"cannot write {real}: it changed while the output was being written")
