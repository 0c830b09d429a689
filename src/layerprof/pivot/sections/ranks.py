"""Cross-rank results of a Run that come from every rank's layer rows (value objects)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerAcrossRanks:
    """One layer's time per forward (its ``total``, as the console tree shows it) on
    every rank that ran it, and how the ranks spread.

    ``ns_by_rank`` holds ``(rank, ns)`` sorted by rank; ``median_ns``,
    ``min_ns`` and ``max_ns`` are over those ranks; ``slowest_rank`` has the
    largest time (the lowest such rank on a tie).
    """

    path: str
    type: str
    ns_by_rank: tuple[tuple[int, float], ...]
    median_ns: float
    min_ns: float
    max_ns: float
    slowest_rank: int

    @property
    def spread(self) -> float | None:
        """(slowest - fastest) / median; None when the median is zero."""
        return (self.max_ns - self.min_ns) / self.median_ns if self.median_ns > 0 else None
