"""A CUDA caching allocator's counters, faked: the CUDA memory paths run on CPU in tests."""

from __future__ import annotations


class FakeAllocator:
    """Bytes in use and the peak since the last reset, moved by hand."""

    def __init__(self) -> None:
        self.now = 0
        self.top = 0

    def alloc(self, n: int) -> None:
        self.now += n
        self.top = max(self.top, self.now)

    def free(self, n: int) -> None:
        self.now -= n

    def allocated(self) -> int:
        return self.now

    def peak(self) -> int:
        return self.top

    def reset_peak(self) -> None:
        self.top = self.now
