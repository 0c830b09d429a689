"""Each step's device work and the window it is measured over, and whether the host's
and the device's clocks agree (see docs/trace.md, "A step's device work").

A step's device work is what its launch calls made (``args.correlation``), wherever
and whenever it ran. Where that work lies inside the step's host span the window is
the host span; where it ran past it (queued launches, CUDA/HIP graph replays) or the
clocks disagree, the window is the work's own span on the device. Idle, utilization
and the step breakdown are measured over these windows. Times are integer ns.
"""

from __future__ import annotations

from dataclasses import dataclass

#: ``StepWork.window``: the step's host span / the work's own span on the device.
HOST, DEVICE = "host", "device"


@dataclass(frozen=True)
class StepWork:
    """One step on one device: the ops its launches made (``ops``; ``busy_ns``, the union
    of their intervals), the first one's start and the last one's end on the device's
    clock, how far they ran past the step's host span (``after_ns``, 0 when inside),
    and the window its idle time and breakdown are measured over."""

    step: str
    device: int
    ops: int
    busy_ns: int
    first_ns: int | None  # None: the step launched nothing on this device
    last_ns: int | None
    after_ns: int
    window: str  # HOST | DEVICE
    window_start_ns: int
    window_ns: int


@dataclass(frozen=True)
class ClockCheck:
    """What one device's ops say of the host's and the device's clocks.

    ``before_launch``: ops that start before their launch call began, impossible on
    clocks that agree (``lead_ns``: the largest such lead). ``inside_launch``: ops
    that start before their launch call returned, which agreeing clocks allow (a
    graph launch's kernels, a blocking copy, a kernel an idle device starts at once).
    ``queued_idle_ns``: the longest time the device shows nothing running while work
    already launched waits for it; launches take microseconds, so a long one means
    the clocks disagree by about that much or the device ran work the trace does not
    show."""

    device: int
    launched: int
    before_launch: int
    lead_ns: int
    inside_launch: int
    queued_idle_ns: int

    @property
    def disagree(self) -> bool:
        return self.before_launch > 0


@dataclass(frozen=True)
class DeviceWork:
    """Every complete step's work per device, and each device's clock check."""

    steps: tuple[StepWork, ...]
    clocks: tuple[ClockCheck, ...]

    @property
    def on_device(self) -> tuple[StepWork, ...]:
        """The steps measured over their work's own span (not their host span)."""
        return tuple(s for s in self.steps if s.window == DEVICE)

    def clock(self, device: int) -> ClockCheck | None:
        return next((c for c in self.clocks if c.device == device), None)
