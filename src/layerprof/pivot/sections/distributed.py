"""Typed sections for distributed runs: each step's time partitioned, the collectives
and their overlap with compute, device queues and launches, the memory timeline
(per rank), and stragglers across ranks.

Value objects only (no numpy): ``layerprof.trace.distributed`` (breakdown, comm,
queue, stragglers) and ``trace/memtimeline.py`` fill them, renderers read them,
``codec/distributed`` saves them. Times are integer ns; a rank's times are relative to its own trace
origin (``Communication.origin_ns`` is that origin on the trace's clock).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from layerprof.pivot.notes import Note

#: The parts of a step's wall time, in the priority order that makes them a partition:
#: at each instant the first part active there gets the time (see docs/trace.md).
BREAKDOWN_PARTS: tuple[str, ...] = (
    "compute",
    "overlap",
    "communication",
    "memcpy",
    "memset",
    "runtime",
    "dataloader",
    "cpu",
    "idle",
)


@dataclass(frozen=True)
class StepBreakdown:
    """One step's wall time on one device, partitioned (the parts add up to ``wall_ns``).

    ``device`` is None for a trace without device ops: there ``compute`` is the
    CPU ops (outside the communication threads) and ``communication`` the CPU
    backends' collectives (gloo). ``compute`` and ``communication`` exclude
    ``overlap`` (compute ∩ communication), so ``compute + overlap`` is the union
    of compute and ``communication`` alone is the exposed communication.
    """

    step: str
    device: int | None
    start_ns: int
    wall_ns: int
    compute_ns: int
    overlap_ns: int
    communication_ns: int
    memcpy_ns: int
    memset_ns: int
    runtime_ns: int
    dataloader_ns: int
    cpu_ns: int
    idle_ns: int

    def parts(self) -> tuple[tuple[str, int], ...]:
        """(part, ns) in ``BREAKDOWN_PARTS`` order."""
        return tuple((p, getattr(self, f"{p}_ns")) for p in BREAKDOWN_PARTS)


@dataclass(frozen=True)
class Breakdown:
    steps: tuple[StepBreakdown, ...]

    def totals(self, device: int | None = None) -> dict[str, int]:
        """Every part summed over the steps (of one device, or all)."""
        rows = [s for s in self.steps if device is None or s.device == device]
        return {p: sum(getattr(s, f"{p}_ns") for s in rows) for p in ("wall", *BREAKDOWN_PARTS)}


@dataclass(frozen=True)
class Collective:
    """One collective as this rank ran it.

    ``start_ns``/``dur_ns``: its execution (the NCCL kernel on the device, or the
    CPU backend's span on its worker thread); ``issue_ns``: when the host issued
    it (the launch call, else the ``c10d::`` op), None when unknown; ``index``: its
    position among this rank's collectives of the same group, kind and step
    (the order every rank issues them in); ``exposed_ns``: execution time not
    overlapped by compute; ``prior_compute_ns``/``prior_top``: the compute this
    rank ran since its previous collective on the same lane (and its largest
    kernel or op), i.e. what it did before arriving.
    """

    kind: str
    name: str
    group: str
    group_size: int | None
    step: str | None
    index: int
    seq: int | None
    issue_ns: int | None
    start_ns: int
    dur_ns: int
    bytes: int | None
    device: int | None
    stream: int | None
    exposed_ns: int
    prior_compute_ns: int
    prior_top: str | None

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns

    @property
    def algbw(self) -> float | None:
        """Algorithmic bandwidth in GB/s (bytes per ns): message size / duration."""
        if self.bytes is None or self.bytes <= 0 or self.dur_ns <= 0:
            return None
        return self.bytes / self.dur_ns

    @property
    def busbw(self) -> float | None:
        """Bus bandwidth in GB/s (nccl-tests' factors on the algorithmic one)."""
        algbw, n = self.algbw, self.group_size
        if algbw is None or n is None or n < 1:
            return None
        return algbw * bus_factor(self.kind, n)


def bus_factor(kind: str, n: int) -> float:
    """nccl-tests' busbw/algbw: 2(n-1)/n for all-reduce, (n-1)/n for gathers,
    scatters and all-to-all, 1 for broadcast, reduce and point-to-point."""
    if n <= 1:
        return 1.0 if kind in ("broadcast", "reduce", "send", "recv", "send_recv") else 0.0
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class Communication:
    """A rank's collectives and how its communication overlaps compute (whole trace).

    ``comm_ns``: union of the collectives' execution; ``overlap_ns``: the part
    of it during compute (union of compute kernels; CPU ops on a host-only trace).
    """

    collectives: tuple[Collective, ...]
    comm_ns: int
    overlap_ns: int
    compute_ns: int
    origin_ns: int
    on_device: bool

    @property
    def exposed_ns(self) -> int:
        return self.comm_ns - self.overlap_ns

    @property
    def overlap_pct(self) -> float | None:
        """Share of communication time overlapped by compute (HTA's comp_comm_overlap_pctg)."""
        return 100.0 * self.overlap_ns / self.comm_ns if self.comm_ns > 0 else None

    def groups(self) -> list[CollectiveGroup]:
        """The collectives by (kind, process group), most time first (ties: first seen)."""
        by: dict[tuple[str, str], list[Collective]] = {}
        for x in self.collectives:
            by.setdefault((x.kind, x.group), []).append(x)
        groups = [CollectiveGroup(kind, group, tuple(xs)) for (kind, group), xs in by.items()]
        return sorted(groups, key=lambda g: -g.total_ns)


@dataclass(frozen=True)
class CollectiveGroup:
    """One rank's collectives of one kind in one process group (``Communication.groups``)."""

    kind: str
    group: str
    collectives: tuple[Collective, ...]

    @property
    def total_ns(self) -> int:
        return sum(x.dur_ns for x in self.collectives)

    @property
    def exposed_ns(self) -> int:
        return sum(x.exposed_ns for x in self.collectives)

    @property
    def bytes(self) -> int | None:
        sizes = [x.bytes for x in self.collectives if x.bytes is not None]
        return sum(sizes) if sizes else None

    @property
    def algbw(self) -> float | None:
        """Median algorithm bandwidth over the calls that know it (GB/s)."""
        return _median([x.algbw for x in self.collectives])

    @property
    def busbw(self) -> float | None:
        """Median bus bandwidth over the calls that know it (GB/s)."""
        return _median([x.busbw for x in self.collectives])


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


@dataclass(frozen=True)
class StreamQueue:
    """Outstanding device ops on one stream: launched, not yet started.

    ``series``: (ns, length) at the changes, thinned to at most a few thousand
    points keeping each bucket's maximum; ``mean_length`` is time-weighted over
    the span from the first launch to the last start.
    """

    device: int
    stream: int
    ops: int
    max_length: int
    mean_length: float
    full_ns: int  # time at or above QUEUE_LIMIT
    series: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class LaunchOutlier:
    name: str
    launch_ns: int  # the launch call's start
    delay_ns: int  # device op start - launch call end


@dataclass(frozen=True)
class Queues:
    """Device queues and launches: what the host waited for, and launch delays.

    ``blocked_ns``: host time in synchronizations plus launch calls made while
    their stream's queue was full; ``short_kernels``: device ops shorter than
    the call that launched them (launch-bound work), ``short_kernel_ns`` their time,
    of ``kernels`` launches compared: one per op, but a graph launch once, against its
    replayed ops' summed time (``graph_launches`` of them, replaying ``graph_ops``).
    """

    streams: tuple[StreamQueue, ...]
    queue_limit: int
    sync_ns: int
    full_launch_ns: int
    delay_threshold_ns: int
    delay_outliers: int
    outliers: tuple[LaunchOutlier, ...]
    short_kernels: int
    short_kernel_ns: int
    kernels: int
    graph_launches: int = 0
    graph_ops: int = 0

    @property
    def blocked_ns(self) -> int:
        return self.sync_ns + self.full_launch_ns


@dataclass(frozen=True)
class DeviceTimeline:
    """Allocated bytes over time on one device, and the moment of the peak."""

    device: str
    points: tuple[tuple[int, int], ...]  # (ns, bytes allocated), thinned keeping maxima
    events: int
    peak_bytes: int
    peak_ns: int
    peak_op: str | None
    peak_layer: str | None
    peak_step: str | None


@dataclass(frozen=True)
class MemoryTimeline:
    devices: tuple[DeviceTimeline, ...]


@dataclass(frozen=True)
class CollectiveMatch:
    """One collective matched across ranks: when each rank arrived (aligned clocks)."""

    group: str
    kind: str
    step: str | None
    index: int
    bytes: int | None
    arrivals: tuple[tuple[int, int], ...]  # (rank, start ns on the aligned clock)
    last_rank: int
    skew_ns: int  # last arrival - first arrival


@dataclass(frozen=True)
class RankLateness:
    """How often one rank arrived last at a matched collective, and what it did before."""

    rank: int
    collectives: int
    unmatched: int
    last: int
    late_ns: int  # skew summed over the collectives it was last at
    median_late_ns: int | None
    prior_compute_ns: int | None  # median compute before the collectives it was last at
    prior_top: str | None  # its most frequent largest kernel/op before them
    clock_offset_ns: int  # its clock minus the reference rank's (from collective ends)
    median_step_ns: int | None


@dataclass(frozen=True)
class Stragglers:
    """Collectives matched across ranks; the rank that arrives last most often.

    ``straggler`` is that rank when it was last at more collectives than an even
    share would give (None otherwise); ``worst`` holds the matches with the
    largest skew (at most ``WORST_MATCHES``); ``notes`` say what could not be matched.
    """

    matched: int
    ranks: tuple[RankLateness, ...]
    worst: tuple[CollectiveMatch, ...]
    straggler: int | None
    median_skew_ns: int | None
    step_spread_ns: int | None  # slowest - fastest median step time
    notes: tuple[Note, ...] = ()
