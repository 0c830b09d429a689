"""How busy the machine was: the CPUs this process may use and the load average.

Stored in a live run's meta (``cpus``, ``load_avg``) so that a finding can say
why the clean and the per-layer pass disagree: other processes (a load above
the CPU count) or more torch threads than CPUs. The load average counts this
run's own busy threads too.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any


def host_load() -> dict[str, Any]:
    """``{"cpus": N, "load_avg": L}`` (the 1-minute load average), each where the OS tells."""
    out: dict[str, Any] = {}
    cpus = _cpus()
    if cpus:
        out["cpus"] = cpus
    with contextlib.suppress(AttributeError, OSError):  # Windows has no load average
        out["load_avg"] = round(os.getloadavg()[0], 2)
    return out


def _cpus() -> int | None:
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        try:
            return len(affinity(0))
        except OSError:
            pass
    return os.cpu_count()
