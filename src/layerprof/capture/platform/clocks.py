"""Clocks the Recorder reads at every layer boundary.

One interface, three implementations:

* ``HostClock`` reads ``time.perf_counter_ns`` — what the CPU spends.
* ``CudaEventClock`` records a CUDA event on the current stream at each mark
  and resolves all of them after one synchronize at the end of a forward;
  it never synchronizes per layer (that would serialize the GPU and change
  what is measured).
* ``FakeClock`` (tests) returns times a test script sets, so tree and
  self-time logic can be checked with exact numbers.
"""

from __future__ import annotations

import time
from typing import Any, Protocol


class Clock(Protocol):
    """Marks are cheap opaque tokens; ``resolve`` turns them into nanoseconds."""

    def mark(self) -> Any: ...

    def resolve(self, marks: list[Any]) -> list[int]:
        """Nanosecond times of ``marks`` on one common origin (after a sync if needed)."""
        ...


class HostClock:
    """Wall time of the host thread."""

    # The builtin itself, not a method calling it: the Recorder reads the clock twice
    # per module call, and a Python frame around it would double what a read costs.
    mark = staticmethod(time.perf_counter_ns)

    def resolve(self, marks: list[Any]) -> list[int]:
        return [int(m) for m in marks]


class CudaEventClock:
    """Device time from CUDA events on the current stream of ``device``.

    Events come from a pool that grows to the number of marks in one forward
    and is then reused, so steady state allocates nothing.
    """

    def __init__(self, device: Any = None) -> None:
        import torch

        self._torch = torch
        self._device = torch.device(device) if device is not None else None
        self._pool: list[Any] = []
        self._next = 0

    def mark(self) -> Any:
        if self._next == len(self._pool):
            self._pool.append(self._torch.cuda.Event(enable_timing=True))  # type: ignore[no-untyped-call]
        event = self._pool[self._next]
        self._next += 1
        # The current stream *of our device*: a bare record() would use the
        # current device's stream, which is cuda:0 when profiling cuda:1.
        event.record(self._torch.cuda.current_stream(self._device))
        return event

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self._device)

    def resolve(self, marks: list[Any]) -> list[int]:
        if not marks:
            return []
        self.synchronize()
        origin = marks[0]
        out = [round(origin.elapsed_time(m) * 1_000_000) for m in marks]
        self._next = 0
        return out


class FakeClock:
    """A clock for tests: ``advance`` moves time; each mark reads the current time."""

    def __init__(self, start_ns: int = 0, tick_ns: int = 0, scale: int = 1) -> None:
        self.now_ns = start_ns
        self.tick_ns = tick_ns
        self.scale = scale

    def advance(self, ns: int) -> None:
        self.now_ns += ns * self.scale

    def mark(self) -> int:
        t = self.now_ns
        self.now_ns += self.tick_ns
        return t

    def resolve(self, marks: list[Any]) -> list[int]:
        return [int(m) for m in marks]


def synchronizer(device: str) -> Any:
    """A no-argument callable that waits for all work on ``device`` (no-op on CPU)."""
    if device.startswith("cuda"):
        import torch

        dev = torch.device(device)
        return lambda: torch.cuda.synchronize(dev)
    return lambda: None
