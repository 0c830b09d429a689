"""Running under ``torchrun``: which process this is, from the launcher's environment.

torchrun sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` for every process.
layerprof does not need a process group: each rank profiles its own replica;
output files get the rank in their name (``p.rank-1.json``, the pattern
``layerprof analyze`` reads ranks from), only rank 0 prints its report, and
``--device cuda`` means the rank's own GPU (``cuda:LOCAL_RANK``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RankInfo:
    rank: int
    local_rank: int
    world_size: int

    @property
    def suffix(self) -> str:
        return f"rank-{self.rank}"


def rank_info() -> RankInfo | None:
    """This process's rank when launched with more than one process, else None."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError:
        return None
    if world <= 1:
        return None
    return RankInfo(rank=rank, local_rank=local, world_size=world)
