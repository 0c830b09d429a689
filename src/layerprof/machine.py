"""What this machine offers the process: CPUs it may run on, memory it may still allocate.

One home for both, read by the input ceilings (``reading``) and by the
command-line limits (``load.limits``). Pure Python, Linux files first.
"""

from __future__ import annotations

import os
from pathlib import Path


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes this process can still allocate: the smaller of the system's available
    memory, what its cgroup (container) allows and what its own limits (``ulimit -v``,
    ``ulimit -d``) leave; None when none is known."""
    known = [b for b in (_meminfo_available(), _cgroup_room()) if b is not None]
    room = min(known) if known else _sysconf_available()
    limit = _rlimit_room()
    return room if limit is None else limit if room is None else min(room, limit)


def _rlimit_room() -> int | None:
    """``RLIMIT_AS`` minus the address space in use, ``RLIMIT_DATA`` minus the data in
    use (the smaller), or None when neither limit is set. Under such a limit an
    allocation fails instead of the kernel's OOM killer stepping in, and orjson then
    crashes (SIGSEGV) instead of raising: the input ceilings must see it."""
    try:
        import resource  # Unix only
    except ImportError:  # pragma: no cover - Windows
        return None
    rooms = []
    for which, field in ((resource.RLIMIT_AS, "VmSize:"), (resource.RLIMIT_DATA, "VmData:")):
        soft = resource.getrlimit(which)[0]
        if soft != resource.RLIM_INFINITY:
            rooms.append(max(soft - (_status_bytes(field) or 0), 0))
    return min(rooms) if rooms else None


def _status_bytes(field: str) -> int | None:
    """A ``kB`` line of ``/proc/self/status`` (``VmSize:``) in bytes."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """cgroup v2 ``memory.max - memory.current``, or v1's limit minus usage."""
    for limit_file, usage_file in (
        ("memory.max", "memory.current"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),
    ):
        try:
            limit = (root / limit_file).read_text().strip()
            usage = int((root / usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or int(limit) >= 2**60:  # no limit set
            return None
        return max(int(limit) - usage, 0)
    return None


def _sysconf_available() -> int | None:
    for pages in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            return os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            continue
    return None
