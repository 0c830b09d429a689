"""Typed sections of a Profile (value objects only: no torch, no numpy).

One module per family: ``trace`` holds what traces and ops mode fill (steps,
GPU time, kernels, memcpy, launches, memory, annotations, where a trace came
from, cross-rank results). A new analysis adds its own module here, a field on
``Profile`` (or ``Run``), and its writer/reader in ``layerprof.codec``.
"""

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
    "STEP_DEFINITIONS",
    "AllocRow",
    "AnnotationRow",
    "CrossRank",
    "DeviceMemory",
    "DeviceUse",
    "KernelRow",
    "KindRow",
    "Launches",
    "LayerAcrossRanks",
    "MemcpyRow",
    "MemorySummary",
    "RankLine",
    "RuntimeRow",
    "Step",
    "StepAcrossRanks",
    "Steps",
    "TraceSource",
]
