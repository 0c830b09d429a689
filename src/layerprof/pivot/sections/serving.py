"""A serving engine's steps by phase (see docs/trace.md, "Serving steps by phase").

SGLang and patched vLLM annotate each step in the roofline convention
``execute_{tokens}_context_{prefill requests}(sq{Σq}sk{Σk}sqsq{Σq²}sqsk{Σq·k})_generation_{decode
requests}(sq..sk..sqsq..sqsk..)``: each step's batch composition. A step is ``prefill``
(prefill requests only), ``decode`` (decode requests only) or ``mixed`` (both). Each
layer's time per phase reuses the generate's per-phase views (``Phase``). Times are
integer ns.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerprof.pivot.sections.generation import Phase

PREFILL, DECODE, MIXED = "prefill", "decode", "mixed"
#: The clock of a serving section's per-layer phase times (``Serving.phase_clock``).
HOST_CLOCK, DEVICE_CLOCK = "host", "device"
PHASE_CLOCKS = (HOST_CLOCK, DEVICE_CLOCK)


@dataclass(frozen=True)
class BatchPart:
    """One side of a step's batch: its requests, their query tokens (Σq), the KV
    positions they attend over (Σk), Σq² and Σq·k (the attention's work)."""

    requests: int
    tokens: int
    kv: int
    q_squared: int
    qk: int


@dataclass(frozen=True)
class ServingStep:
    """One annotated step: its composition and time (``time_ns``: the step's host span, or
    its device work's own span where that ran outside it), and the FLOPs counted from
    its matrix products' shapes (``flops``; None: none with shapes) with the device time
    of their kernels (``flop_device_ns``) and the share of the device time of all the
    step's launches those kernels are (``flop_coverage``)."""

    name: str
    phase: str  # PREFILL | DECODE | MIXED
    tokens: int  # the annotation's scheduled tokens
    prefill: BatchPart
    decode: BatchPart
    time_ns: int
    flops: int | None = None
    flop_device_ns: int = 0
    flop_coverage: float | None = None

    @property
    def tokens_per_s(self) -> float | None:
        """The step's query tokens (prefill's and decode's) per second of its time."""
        if self.time_ns <= 0:
            return None
        return (self.prefill.tokens + self.decode.tokens) / self.time_ns * 1e9

    @property
    def ns_per_prefill_token(self) -> float | None:
        """A prefill step's time per prompt token (None for decode and mixed steps)."""
        if self.phase != PREFILL or not self.prefill.tokens:
            return None
        return self.time_ns / self.prefill.tokens

    @property
    def ns_per_decode_request(self) -> float | None:
        """A decode step's time per request: each request's time for one new token."""
        if self.phase != DECODE or not self.decode.requests:
            return None
        return self.time_ns / self.decode.requests

    @property
    def flop_rate(self) -> float | None:
        """Achieved FLOP/s of the counted matrix products, over their kernels' time."""
        if not self.flops or self.flop_device_ns < 1_000:
            return None
        return self.flops / self.flop_device_ns * 1e9

    @property
    def flops_per_token(self) -> float | None:
        tokens = self.prefill.tokens + self.decode.tokens
        return self.flops / tokens if self.flops and tokens else None


@dataclass(frozen=True)
class Serving:
    """The annotated steps (complete steps, in order), each layer's time per phase across
    them, and the annotations that were not read (``ignored``: names, at most a few;
    ``ignored_count``: all of them). ``phase_clock``: what the layers' phase times are:
    ``device`` (the kernels each layer launched, by the step that launched them: a
    serving step's kernels run after its host span) where the trace has device ops,
    ``host`` (the layers' host spans) where it has none."""

    steps: tuple[ServingStep, ...]
    phases: tuple[Phase, ...] = ()
    ignored: tuple[str, ...] = ()
    ignored_count: int = 0
    phase_clock: str = HOST_CLOCK

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    def of_phase(self, name: str) -> tuple[ServingStep, ...]:
        return tuple(s for s in self.steps if s.phase == name)
