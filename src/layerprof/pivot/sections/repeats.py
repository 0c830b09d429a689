"""The run-to-run spread of a profile: one set of medians per separate process.

Timings drift between processes (clock frequency, memory layout, thread
placement, other jobs) by far more than the jitter inside one process, so a
comparison that is to separate a change from drift needs several processes
per side (``layerprof run --repeat N``) or, better, both models run in
alternating rounds (``layerprof diff --run BASE NEW --rounds N``), where each
round pairs a base process with a new one and a drift of the machine hits both.

``runs`` holds, per process, the median latency and each layer's median self
time per forward (host, and device where recorded), and each layer's host self
time relative to the rest of the same forward (``rest_ratio``): a process that
runs 20 % slower throughout scales a layer and the rest of its forward alike,
so that ratio moves only when the layer changes against the rest of the model. A
generate's process keeps its medians too: time to first token, inter-token latency and
each phase's layers' self times. ``session`` is shared by
the two sides of one interleaved A/B run and ``RunMedians.round`` numbers its
rounds: runs of the same round and session are paired; anything else is
compared as two independent sets of runs. Value objects only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Side = Literal["base", "new"]


@dataclass(frozen=True)
class RunMedians:
    """One process's medians (integer ns): latency and per-layer self time per forward."""

    latency_ns: int | None
    self_ns: Mapping[str, int] = field(default_factory=dict)
    device_self_ns: Mapping[str, int] | None = None
    round: int | None = None
    rest_ratio: Mapping[str, float] | None = None
    """Per layer: its self time over the rest of the forward (all other layers' self
    times), per iteration, 20 %-trimmed mean over the iterations; None: not recorded."""
    ttft_ns: int | None = None
    """A generate's median time to first token and inter-token latency in this process
    (its clean pass); None without a generation section."""
    itl_ns: int | None = None
    phase_self_ns: Mapping[str, Mapping[str, int]] | None = None
    """Per phase of a generate (``prefill``, ``decode``, ...), each layer's median self
    time per forward of that phase; None without a generation section."""


@dataclass(frozen=True)
class Repeats:
    """Medians of ``runs`` separate processes of one model; see the module docstring."""

    runs: tuple[RunMedians, ...]
    session: str | None = None
    side: Side | None = None

    @property
    def n(self) -> int:
        return len(self.runs)

    def latencies(self) -> dict[int, int]:
        """Per-run median latency by run key (the round when paired, else the index)."""
        return {
            self.key(i): r.latency_ns for i, r in enumerate(self.runs) if r.latency_ns is not None
        }

    def generation(self, quantity: str) -> dict[int, int]:
        """Per-run median ``ttft`` or ``itl`` by run key; runs without one are left out."""
        out: dict[int, int] = {}
        for i, r in enumerate(self.runs):
            value = r.ttft_ns if quantity == "ttft" else r.itl_ns
            if value is not None:
                out[self.key(i)] = value
        return out

    def phase_layer(self, phase: str, path: str) -> dict[int, int]:
        """Per-run median self time of ``path`` in ``phase`` by run key; runs that lack it
        are left out."""
        out: dict[int, int] = {}
        for i, r in enumerate(self.runs):
            layers = r.phase_self_ns.get(phase) if r.phase_self_ns is not None else None
            if layers is not None and path in layers:
                out[self.key(i)] = layers[path]
        return out

    def layer(self, path: str, clock: str = "host") -> dict[int, int]:
        """Per-run median self time of ``path`` by run key; runs that lack it are left out."""
        out: dict[int, int] = {}
        for i, r in enumerate(self.runs):
            times = r.device_self_ns if clock == "device" else r.self_ns
            if times is not None and path in times:
                out[self.key(i)] = times[path]
        return out

    def subtree(self, path: str, clock: str = "host") -> dict[int, int]:
        """Per-run total of ``path`` by run key: its own and every descendant's median
        self time summed (a profile's total per forward, by definition); runs that lack
        ``path`` are left out."""
        prefix = f"{path}." if path else ""
        out: dict[int, int] = {}
        for i, r in enumerate(self.runs):
            times = r.device_self_ns if clock == "device" else r.self_ns
            if times is not None and path in times:
                out[self.key(i)] = sum(
                    ns for p, ns in times.items() if p == path or p.startswith(prefix)
                )
        return out

    def layer_ratio(self, path: str) -> dict[int, float]:
        """Per-run ``rest_ratio`` of ``path`` by run key; runs without one are left out."""
        return {
            self.key(i): r.rest_ratio[path]
            for i, r in enumerate(self.runs)
            if r.rest_ratio is not None and path in r.rest_ratio
        }

    def key(self, index: int) -> int:
        r = self.runs[index].round
        return r if r is not None else index

    def pairs_with(self, other: Repeats) -> bool:
        """Whether the two sides come from one interleaved run (same session, rounds set)."""
        return (
            self.session is not None
            and self.session == other.session
            and all(r.round is not None for r in (*self.runs, *other.runs))
        )
