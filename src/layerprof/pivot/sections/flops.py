"""FLOPs, their coverage and the device's peak: what the counting pass found.

Value objects only (no torch). ``layerprof.capture.flops.counter`` fills them, the
codec saves them, ``layerprof.analysis.roofline`` derives achieved rates and
bounds from them, renderers show them. Conventions (docs/flops.md):

* one multiply-accumulate is 2 FLOPs (matmul, conv, attention, RNN gates);
  bias additions are not counted (as torch's own counter does);
* elementwise ops (activations, arithmetic, norms, softmax, reductions) are
  counted per element and kept apart, labelled ``elementwise``;
* ops that move data (views, copies, embedding lookups, indexing) do 0 FLOPs;
* an op with no formula, or whose formula cannot apply (symbolic shapes, a
  dtype with no formula), is *uncounted*: never a silent 0. What share of the
  op time it took is kept, per layer and for the model.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The one wording of the counting convention (console header, JSON, HTML).
CONVENTION = "1 multiply-accumulate = 2 FLOPs; elementwise ops counted per element, apart"


@dataclass(frozen=True)
class LayerFlops:
    """One layer's counted work per forward, inclusive of its children.

    ``LayerInfo.flops`` holds the total counted forward FLOPs; ``elementwise``
    is the part of it from elementwise ops. ``bytes`` is what the layer's ops
    read and wrote (tensor sizes from shapes and dtypes; views are free).
    ``counted_ns``/``uncounted_ns`` split the layer's op time, measured in the
    counting forward, between ops with and without a formula; ``uncounted``
    names the op with the most uncounted time and why (``aten.foo: no
    formula``). ``label`` says what the counted work is when it is not
    tensor FLOPs: ``elementwise``, or for a layer of 0 FLOPs ``lookup``
    (embeddings) or ``data movement``. ``backward``/``backward_elementwise``
    are counted with ``--backward`` only (None otherwise).
    """

    elementwise: int = 0
    bytes: int = 0
    counted_ns: int = 0
    uncounted_ns: int = 0
    uncounted: str | None = None
    label: str | None = None
    backward: int | None = None
    backward_elementwise: int | None = None

    @property
    def op_ns(self) -> int:
        return self.counted_ns + self.uncounted_ns

    @property
    def uncounted_share(self) -> float | None:
        """Share of the layer's op time spent in uncounted ops (None: no ops timed)."""
        total = self.op_ns
        return self.uncounted_ns / total if total > 0 else None


@dataclass(frozen=True)
class UncountedOp:
    """An operator without a usable formula: its time in one forward, calls, and why."""

    name: str
    time_ns: int
    calls: int
    reason: str


@dataclass(frozen=True)
class Peak:
    """The device's peak compute rate and memory bandwidth for the run's dtype.

    ``source`` is ``measured`` (a short matmul and copy at start), ``cached``
    (an earlier measurement on this machine), ``table`` (known GPU by name)
    or ``given`` (``--peak``); ``detail`` says which (``NVIDIA H100 80GB HBM3:
    BF16 tensor cores, dense``). A rate that is not known is None.
    """

    flops_per_s: float | None
    bytes_per_s: float | None
    source: str
    detail: str = ""

    @property
    def ridge(self) -> float | None:
        """Arithmetic intensity (FLOP/byte) where memory- and compute-bound meet."""
        if not self.flops_per_s or not self.bytes_per_s:
            return None
        return self.flops_per_s / self.bytes_per_s


@dataclass(frozen=True)
class FlopSummary:
    """The model's counted FLOPs, coverage, top uncounted ops and the peak.

    ``forward``/``elementwise`` are the whole forward's counted FLOPs (and the
    elementwise part); ``backward`` the backward's (``--backward``), of which
    ``backward_unattributed`` ran in no layer (the loss, gradient
    accumulation). ``counted_ns``/``uncounted_ns`` split the op time of the
    counting forward; ``uncounted_ops`` are the uncounted ops by time.
    """

    forward: int
    elementwise: int = 0
    counted_ns: int = 0
    uncounted_ns: int = 0
    uncounted_ops: tuple[UncountedOp, ...] = ()
    backward: int | None = None
    backward_unattributed: int | None = None
    peak: Peak | None = None
    convention: str = CONVENTION

    @property
    def coverage(self) -> float | None:
        """Share of the forward's op time in ops with a formula (None: nothing timed)."""
        total = self.counted_ns + self.uncounted_ns
        return self.counted_ns / total if total > 0 else None
