"""Ceilings on what a command line may ask for, checked before torch is asked.

torch crashes rather than refuses on some values: ``torch.set_num_threads(100000)``
segfaults at the first parallel operator, ``manual_seed`` overflows past 64 bits,
and a ``100000x100000`` input is allocated until the kernel kills the process.
Pure Python; torch is not imported.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Threads per CPU a run may ask for: more only oversubscribes (and torch crashes
#: long before the thread count is absurd).
THREADS_PER_CPU = 4
#: The seeds ``torch.Generator.manual_seed`` accepts.
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def max_threads() -> int:
    return THREADS_PER_CPU * cpu_count()


def threads_problem(threads: int) -> str | None:
    """Why ``threads`` cannot be used, or None."""
    if threads < 1:
        return f"{threads} threads: need at least 1"
    if threads > max_threads():
        return (
            f"{threads} threads is more than {THREADS_PER_CPU} per CPU"
            f" ({cpu_count()} CPUs here, at most {max_threads()})"
        )
    return None


def seed_problem(seed: int) -> str | None:
    if not SEED_MIN <= seed <= SEED_MAX:
        return f"seed {seed} is outside [{SEED_MIN}, {SEED_MAX}] (64 bits)"
    return None


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


def _cgroup_room() -> int | None:
    """cgroup v2 ``memory.max - memory.current``, or v1's limit minus usage."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
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


def format_bytes(n: int) -> str:
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
