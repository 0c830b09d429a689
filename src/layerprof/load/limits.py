"""Ceilings on what a command line may ask for, checked before torch is asked.

torch crashes rather than refuses on some values: ``torch.set_num_threads(100000)``
segfaults at the first parallel operator, ``manual_seed`` overflows past 64 bits,
and a ``100000x100000`` input is allocated until the kernel kills the process.
Pure Python; torch is not imported.
"""

from __future__ import annotations

from layerprof.machine import cpu_count

#: Threads per CPU a run may ask for: more only oversubscribes (and torch crashes
#: long before the thread count is absurd).
THREADS_PER_CPU = 4
#: The seeds ``torch.Generator.manual_seed`` accepts.
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1


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
