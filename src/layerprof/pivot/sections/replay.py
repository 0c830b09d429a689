"""A graph replay read through its capture: what matched, what did not.

``layerprof analyze REPLAY --capture CAPTURE`` gives each replayed kernel the
layer, op and shapes whose launch made it at capture time (``trace/capturepair.py``);
this section says how far that went, so a per-layer number is never a silent guess.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CaptureFile:
    """One capture trace handed in (``--capture`` or ``capture_traces/``)."""

    file: str
    batch: int | None  # the batch size it was captured for (execution_details.json), if known
    mode: str  # the engine's graph mode (FULL, PIECEWISE, DECODE...), "" when unknown
    launches: int  # launches recorded into its graph (kernels, copies, fills)
    named: bool  # its launch calls name their kernels (else matched by position only)
    compiled_pieces: int  # "## Call CompiledFxGraph" spans: compiled code, no layers inside
    graphs: int = 1  # capture windows in the file (an engine may capture each batch size)
    batches: tuple[int, ...] = ()  # each window's batch, where known


@dataclass(frozen=True)
class GraphMatch:
    """One graph launch of the replay and the capture it was read through."""

    call: str  # cudaGraphLaunch / hipGraphLaunch
    kernels: int  # device ops it replayed
    device_ns: int  # their summed durations
    capture: str | None  # the capture file it was matched to, None: none matched
    capture_batch: int | None  # the batch of the captured graph it was read through
    batch_hint: int | None  # the batch its step annotation names, if any
    matched: int  # device ops paired with a captured launch
    matched_ns: int


@dataclass(frozen=True)
class MissedKernel:
    """Replayed device ops of one name that no captured launch paired with."""

    name: str
    count: int
    device_ns: int


@dataclass(frozen=True)
class GraphReplay:
    """The graph launches of a replay trace read through their capture(s)."""

    captures: tuple[CaptureFile, ...]
    graphs: tuple[GraphMatch, ...]
    missed: tuple[MissedKernel, ...]  # by device time, the largest first (all of them)
    outside_ops: int  # the replay's device ops outside any graph (launched one by one)
    outside_ns: int

    @property
    def kernels(self) -> int:
        return sum(g.kernels for g in self.graphs)

    @property
    def matched(self) -> int:
        return sum(g.matched for g in self.graphs)

    @property
    def device_ns(self) -> int:
        return sum(g.device_ns for g in self.graphs)

    @property
    def matched_ns(self) -> int:
        return sum(g.matched_ns for g in self.graphs)

    @property
    def graphs_matched(self) -> int:
        return sum(1 for g in self.graphs if g.capture is not None)

    @property
    def share(self) -> float | None:
        """The replayed device time put on layers, as a fraction (None: nothing replayed)."""
        return self.matched_ns / self.device_ns if self.device_ns else None


__all__ = ["CaptureFile", "GraphMatch", "GraphReplay", "MissedKernel"]
