"""Typed sections of a Profile (value objects only: no torch, no numpy).

One module per family: ``trace`` holds what traces and ops mode fill (steps,
GPU time, kernels, memcpy, launches, memory, annotations, where a trace came
from, cross-rank results); ``distributed`` the step breakdown, collectives,
queues, memory timeline and stragglers; ``passes`` whether a live run's per-layer
pass ran the clean pass's code (fused fast paths). A new analysis adds its own
module here, a field on ``Profile`` (or ``Run``), and its writer/reader in
``layerprof.codec``.
"""

from layerprof.sections.distributed import (
    BREAKDOWN_PARTS,
    Breakdown,
    Collective,
    CollectiveMatch,
    Communication,
    DeviceTimeline,
    LaunchOutlier,
    MemoryTimeline,
    Queues,
    RankLateness,
    StepBreakdown,
    Stragglers,
    StreamQueue,
    bus_factor,
)
from layerprof.sections.passes import FusedLayer, PassCheck
from layerprof.sections.ranks import LayerAcrossRanks
from layerprof.sections.trace import (
    STEP_DEFINITIONS,
    AllocRow,
    AnnotationRow,
    CrossRank,
    DeviceMemory,
    DeviceUse,
    KernelRow,
    KindRow,
    Launches,
    MemcpyRow,
    MemorySummary,
    RankLine,
    RuntimeRow,
    Step,
    StepAcrossRanks,
    Steps,
    TraceSource,
)

__all__ = [
    "BREAKDOWN_PARTS",
    "STEP_DEFINITIONS",
    "AllocRow",
    "AnnotationRow",
    "Breakdown",
    "Collective",
    "CollectiveMatch",
    "Communication",
    "CrossRank",
    "DeviceMemory",
    "DeviceTimeline",
    "DeviceUse",
    "FusedLayer",
    "KernelRow",
    "KindRow",
    "LaunchOutlier",
    "Launches",
    "LayerAcrossRanks",
    "MemcpyRow",
    "MemorySummary",
    "MemoryTimeline",
    "PassCheck",
    "Queues",
    "RankLateness",
    "RankLine",
    "RuntimeRow",
    "Step",
    "StepAcrossRanks",
    "StepBreakdown",
    "Steps",
    "Stragglers",
    "StreamQueue",
    "TraceSource",
    "bus_factor",
]
