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
    memory and what its cgroup (container) allows; None when neither is known."""
    known = [b for b in (_meminfo_available(), _cgroup_room()) if b is not None]
    return min(known) if known else _sysconf_available()


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
