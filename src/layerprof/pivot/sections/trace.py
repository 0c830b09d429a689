"""Typed sections of a Profile that traces and ops mode fill: steps, GPU time,
kernels, memcpy, launches, memory, annotations and where a trace came from.

Value objects only (no torch, no numpy): ``layerprof.trace`` computes them,
every renderer reads them, the codec saves and loads them. Times are integer
nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerprof.pivot.notes import Note
from layerprof.stats import Summary
from layerprof.traceformat import GPU_STEP_SOURCE, LAYER_CATEGORY, STEP_SOURCE

#: What a step is, per ``Steps.source``: one wording for the console, notes and HTML.
STEP_DEFINITIONS: dict[str, str] = {
    STEP_SOURCE: "ProfilerStep#N spans (prof.step())",
    GPU_STEP_SOURCE: "ProfilerStep#N spans on the GPU timeline (gpu_user_annotation),"
    " the trace's only step markers",
    "record_function": "outermost record_function spans on the main thread"
    " (framework annotations left out)",
    LAYER_CATEGORY: "outermost layerprof layer spans (one per forward)",
    "nn.Module": "outermost nn.Module spans on the main thread (forward passes)",
    "trace": "the whole trace (no steps found)",
}


@dataclass(frozen=True)
class Step:
    name: str
    start_ns: int
    dur_ns: int
    cut_off: bool = False

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(frozen=True)
class Steps:
    """The steps found, how (``source``), on which host thread, and what else was tried."""

    steps: tuple[Step, ...]
    # "ProfilerStep" | "GPU ProfilerStep" | "record_function" | "layerprof_layer"
    # | "nn.Module" | "trace" (see STEP_DEFINITIONS)
    source: str
    thread: int | None
    notes: tuple[Note, ...] = ()

    @property
    def complete(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if not s.cut_off)

    @property
    def definition(self) -> str:
        """The step rule in words."""
        return STEP_DEFINITIONS.get(self.source, self.source)

    def windows(self, extent: tuple[int, int]) -> list[tuple[int, int]]:
        """Intervals that idle time and utilization are measured over."""
        done = self.complete
        if self.source == "trace" or not done:
            return [extent]
        return [(s.start_ns, s.end_ns) for s in done]


@dataclass(frozen=True)
class DeviceUse:
    device: int
    busy_ns: int
    busy_in_window_ns: int
    window_ns: int
    idle_ns: int
    utilization: float
    kernel_ns: int
    memcpy_ns: int
    memset_ns: int
    streams: int
    host_wait_ns: int
    short_gap_ns: int
    other_idle_ns: int


@dataclass(frozen=True)
class KernelRow:
    name: str
    kind: str  # "compute" | "communication" | "memory"
    calls: int
    total_ns: int
    min_ns: int
    max_ns: int

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0


@dataclass(frozen=True)
class KindRow:
    kind: str
    calls: int
    total_ns: int


@dataclass(frozen=True)
class MemcpyRow:
    kind: str  # HtoD, DtoH, DtoD, ..., "Memset", or the op's name (MTIA: dma_request)
    calls: int
    total_ns: int
    bytes: int

    @property
    def gb_per_s(self) -> float | None:
        return self.bytes / self.total_ns if self.total_ns > 0 and self.bytes > 0 else None


@dataclass(frozen=True)
class RuntimeRow:
    name: str
    calls: int
    total_ns: int


@dataclass(frozen=True)
class Launches:
    """Runtime launch calls matched to a device op, and the delay to its start."""

    launches: int
    call_ns: Summary | None  # duration of the launch call itself
    call_total_ns: int
    delay_ns: Summary | None  # device op start - launch call end
    negative_delays: int  # clock skew between CPU and GPU timelines
    unmatched_device_ops: int
    sync_ns: int  # cuda_sync events + runtime *Synchronize calls
    runtime: tuple[RuntimeRow, ...]


@dataclass(frozen=True)
class DeviceMemory:
    device: str  # "cpu", "cuda:0", ...
    peak_allocated: int
    allocations: int
    allocated_bytes: int
    freed_bytes: int


@dataclass(frozen=True)
class AllocRow:
    op: str  # "(outside ops)" for allocations with no enclosing op
    allocations: int
    bytes: int


@dataclass(frozen=True)
class AllocatorSummary:
    """The allocator's figures from a trace's ``[memory]`` instants (the trace's
    ``memory`` section): not the activation memory of ``pivot/sections/memory.py``."""

    devices: tuple[DeviceMemory, ...]
    top_ops: tuple[AllocRow, ...]


@dataclass(frozen=True)
class AnnotationRow:
    """One node of a trace's ``record_function`` tree, summed over the whole trace."""

    path: str
    name: str
    parent: str | None
    calls: int
    total_ns: int
    self_ns: int
    device_ns: int | None = None
    device_self_ns: int | None = None


@dataclass(frozen=True)
class TraceSource:
    """Where a trace-based profile came from and what the trace held.

    ``module_source`` says where its layer rows came from
    (``layerprof_layer``: layerprof's layer spans; ``nn.Module``: the
    profiler's module spans; None: no module tree). ``producer`` is
    ``{"version", "model"}`` when layerprof wrote the trace; ``run`` the
    run's meta from layerprof's marker.
    """

    file: str
    rank: int
    events: int
    has_device: bool
    window_ns: int
    device_names: tuple[str, ...] = ()
    module_source: str | None = None
    producer: dict[str, Any] | None = None
    run: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepAcrossRanks:
    name: str
    ns_by_rank: tuple[tuple[int, int], ...]  # (rank, step ns)
    slowest_rank: int
    spread_ns: int


@dataclass(frozen=True)
class RankLine:
    rank: int
    median_step_ns: float | None
    communication_ns: int
    compute_ns: int


@dataclass(frozen=True)
class CrossRank:
    steps: tuple[StepAcrossRanks, ...]
    ranks: tuple[RankLine, ...]
    slowest_rank: int | None  # by median step time

    @property
    def kernel_time(self) -> bool:
        """Whether the ranks' communication/compute (device kernel time) was measured:
        a trace without device kernels has 0 there, which is not 0 work."""
        return any(line.communication_ns or line.compute_ns for line in self.ranks)
