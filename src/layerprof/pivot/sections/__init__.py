"""Typed sections of a Profile (value objects only: no torch, no numpy).

One module per family: ``flops`` holds counted FLOPs, their coverage and the
device's peak; ``trace`` holds what traces and ops mode fill (steps,
GPU time, kernels, memcpy, launches, memory, annotations, where a trace came
from, cross-rank results); ``distributed`` the step breakdown, collectives,
queues, memory timeline and stragglers; ``passes`` whether a live run's per-layer
pass ran the clean pass's code (fused fast paths); ``compiled`` how a ``--compile``
run's kernel time went to layers; ``inputs`` the input signatures a Recorder saw;
``memory`` the bytes each layer saves for backward (activation memory).
``loop`` a training loop's steps (data wait, forward, backward, optimizer, rest)
and each layer's forward and backward per step.
A new analysis adds its own module here, a field on ``Profile`` (or ``Run``), and
its writer/reader in ``layerprof.codec``. The package imports a module when one
of its names is first read: a name listed here is in the ``TYPE_CHECKING``
imports (for the type checker) and in ``_HOME`` (for the program).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from layerprof.pivot.sections.compiled import CompiledSection
    from layerprof.pivot.sections.distributed import (
        BREAKDOWN_PARTS,
        Breakdown,
        Collective,
        CollectiveGroup,
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
    from layerprof.pivot.sections.flops import (
        CONVENTION,
        FlopSummary,
        LayerFlops,
        Peak,
        UncountedOp,
    )
    from layerprof.pivot.sections.inputs import InputSignature
    from layerprof.pivot.sections.loop import STEP_PARTS, LayerSteps, LoopStep, TrainingLoop
    from layerprof.pivot.sections.passes import FusedLayer, PassCheck
    from layerprof.pivot.sections.ranks import LayerAcrossRanks
    from layerprof.pivot.sections.repeats import Repeats, RunMedians
    from layerprof.pivot.sections.replay import CaptureFile, GraphMatch, GraphReplay, MissedKernel
    from layerprof.pivot.sections.serving import BatchPart, Serving, ServingStep
    from layerprof.pivot.sections.stepwork import ClockCheck, DeviceWork, StepWork
    from layerprof.pivot.sections.trace import (
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

# Each name's module, imported on first use (PEP 562): a frozen dataclass costs
# about 1 ms to create on Python 3.11, and `layerprof analyze` of a trace needs
# neither a compiled run's, a generate's nor a training loop's sections.
_HOME: dict[str, str] = {
    "CompiledSection": "compiled",
    "BREAKDOWN_PARTS": "distributed",
    "Breakdown": "distributed",
    "Collective": "distributed",
    "CollectiveGroup": "distributed",
    "CollectiveMatch": "distributed",
    "Communication": "distributed",
    "DeviceTimeline": "distributed",
    "LaunchOutlier": "distributed",
    "MemoryTimeline": "distributed",
    "Queues": "distributed",
    "RankLateness": "distributed",
    "StepBreakdown": "distributed",
    "Stragglers": "distributed",
    "StreamQueue": "distributed",
    "bus_factor": "distributed",
    "CONVENTION": "flops",
    "FlopSummary": "flops",
    "LayerFlops": "flops",
    "Peak": "flops",
    "UncountedOp": "flops",
    "InputSignature": "inputs",
    "LayerSteps": "loop",
    "LoopStep": "loop",
    "STEP_PARTS": "loop",
    "TrainingLoop": "loop",
    "FusedLayer": "passes",
    "PassCheck": "passes",
    "LayerAcrossRanks": "ranks",
    "Repeats": "repeats",
    "CaptureFile": "replay",
    "GraphMatch": "replay",
    "GraphReplay": "replay",
    "MissedKernel": "replay",
    "RunMedians": "repeats",
    "BatchPart": "serving",
    "Serving": "serving",
    "ServingStep": "serving",
    "ClockCheck": "stepwork",
    "DeviceWork": "stepwork",
    "StepWork": "stepwork",
    "AllocRow": "trace",
    "AnnotationRow": "trace",
    "CrossRank": "trace",
    "DeviceMemory": "trace",
    "DeviceUse": "trace",
    "KernelRow": "trace",
    "KindRow": "trace",
    "Launches": "trace",
    "MemcpyRow": "trace",
    "MemorySummary": "trace",
    "RankLine": "trace",
    "RuntimeRow": "trace",
    "STEP_DEFINITIONS": "trace",
    "Step": "trace",
    "StepAcrossRanks": "trace",
    "Steps": "trace",
    "TraceSource": "trace",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # found once; later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "BREAKDOWN_PARTS",
    "CONVENTION",
    "STEP_DEFINITIONS",
    "STEP_PARTS",
    "AllocRow",
    "AnnotationRow",
    "BatchPart",
    "Breakdown",
    "CaptureFile",
    "ClockCheck",
    "Collective",
    "CollectiveGroup",
    "CollectiveMatch",
    "Communication",
    "CompiledSection",
    "CrossRank",
    "DeviceMemory",
    "DeviceTimeline",
    "DeviceUse",
    "DeviceWork",
    "FlopSummary",
    "FusedLayer",
    "GraphMatch",
    "GraphReplay",
    "InputSignature",
    "KernelRow",
    "KindRow",
    "LaunchOutlier",
    "Launches",
    "LayerAcrossRanks",
    "LayerFlops",
    "LayerSteps",
    "LoopStep",
    "MemcpyRow",
    "MemorySummary",
    "MemoryTimeline",
    "MissedKernel",
    "PassCheck",
    "Peak",
    "Queues",
    "RankLateness",
    "RankLine",
    "Repeats",
    "RunMedians",
    "RuntimeRow",
    "Serving",
    "ServingStep",
    "Step",
    "StepAcrossRanks",
    "StepBreakdown",
    "StepWork",
    "Steps",
    "Stragglers",
    "StreamQueue",
    "TraceSource",
    "TrainingLoop",
    "UncountedOp",
    "bus_factor",
]
