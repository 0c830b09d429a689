"""A language model's ``generate()``: prefill and decode apart (see docs/definitions.md,
"Generation").

Measured in two passes, as a forward is: a clean pass (no hooks; one logits
processor that reads the clock when each token's logits are ready) gives the time
to first token, the inter-token latencies and the whole generate; the per-layer
pass (the Recorder) times every forward, each tagged with its phase: ``prefill``
(the forward that takes the prompt) or ``decode`` (one new token against the
cache). Times are integer ns.

The rule that tags a forward (``forward_phase``, ``tag_forwards``) and the
section's assembly (``assemble_generation``, on ``phase_views``) are here, pure and
free of torch, so that the Recorder, ``--generate`` and a trace decide them alike.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from layerprof.pivot.sections.flops import Peak
from layerprof.stats import SMALL_SUMMARY, Series, Summary, median


@dataclass(frozen=True)
class PhaseLayer:
    """One layer in one phase: its total and self time per forward of that phase
    (medians over those forwards; ``self_summary`` has the median's interval), and
    for decode how its self time grows with the context (ns per 1,000 positions, a
    least-squares slope over the decode steps; None with fewer than 3 steps).
    ``flops`` and ``bytes`` are the layer's counted work in one forward of the phase
    (inclusive of its children; None where not counted): prefill's over the prompt,
    decode's for one token against the cache."""

    path: str
    total_ns: float
    self_ns: float
    self_summary: Summary | None = None
    growth_ns_per_1k: float | None = None
    flops: int | None = None
    bytes: int | None = None

    @property
    def rate(self) -> float | None:
        """Achieved FLOP/s: the phase's counted FLOPs over the layer's total time."""
        if not self.flops or self.total_ns < 1_000:  # a sliver of time gives no rate
            return None
        return self.flops / self.total_ns * 1e9

    @property
    def intensity(self) -> float | None:
        """FLOP per byte moved in one forward of the phase."""
        return self.flops / self.bytes if self.flops and self.bytes else None

    @property
    def bandwidth(self) -> float | None:
        """Bytes moved per second (the phase's counted bytes over the total time)."""
        if not self.bytes or self.total_ns < 1_000:
            return None
        return self.bytes / self.total_ns * 1e9

    def bound(self, peak: Peak | None) -> str | None:
        """``compute`` at or above the device's ridge, ``memory`` below (None: unknown)."""
        ridge = peak.ridge if peak is not None else None
        intensity = self.intensity
        if ridge is None or intensity is None:
            return None
        return "compute" if intensity >= ridge else "memory"


@dataclass(frozen=True)
class Phase:
    """The forwards of one phase in the per-layer pass: how many, how many tokens
    each one processed (prompt length x batch for prefill, the batch for decode),
    and each layer's times in it."""

    name: str
    forwards: int
    tokens_per_forward: int
    layers: tuple[PhaseLayer, ...]

    def layer(self, path: str) -> PhaseLayer | None:
        return next((x for x in self.layers if x.path == path), None)

    @property
    def forward_ns(self) -> float:
        """One forward of the phase: the totals of its outermost layers (the model's
        root, or the encoder that ``generate()`` runs apart, whose parent did not run)."""
        paths = {x.path for x in self.layers}
        return sum(x.total_ns for x in self.layers if not _has_ancestor(x.path, paths))

    def heaviest(self, n: int) -> tuple[PhaseLayer, ...]:
        """The ``n`` layers with the most self time per forward, in model order."""
        keep = {x.path for x in sorted(self.layers, key=lambda x: -x.self_ns)[:n]}
        return tuple(x for x in self.layers if x.path in keep)


def _has_ancestor(path: str, paths: set[str]) -> bool:
    """Whether one of ``paths`` is a parent module of ``path`` (the root is every path's)."""
    if not path:
        return False
    if "" in paths:
        return True
    parts = path.split(".")
    return any(".".join(parts[:k]) in paths for k in range(1, len(parts)))


@dataclass(frozen=True)
class KvCache:
    """The key/value cache after one generate: bytes per cache layer (its self-attention
    keys and values: each new token adds ``bytes_per_token``), and for an
    encoder-decoder model the cross-attention's keys and values of the encoded prompt
    (``cross_bytes``, the same size whatever the number of new tokens)."""

    layers: tuple[int, ...]
    positions: int
    cross_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return sum(self.layers) + self.cross_bytes

    @property
    def bytes_per_token(self) -> float:
        return sum(self.layers) / self.positions if self.positions else 0.0


@dataclass(frozen=True)
class Generation:
    """``generate()`` of ``new_tokens`` tokens (greedy, exactly that many) after a prompt
    of ``prompt_tokens`` for each of ``batch`` sequences, timed ``generates`` times.

    ``ttft_ns``: from the ``generate`` call to the first token's logits, one per
    generate; ``itl_ns``: between consecutive tokens' logits, every gap of every
    timed generate; ``generate_ns``: the whole call. A Recorder around the user's own
    generate or decode loop has no clean pass: those are None there, and the counts
    come from the forwards it saw (``generates``: prefill forwards).
    """

    new_tokens: int
    prompt_tokens: int
    batch: int
    generates: int
    ttft_ns: Series | None  # None: recorded in the user's own loop (no clean pass)
    itl_ns: Series | None  # None then too, or when one new token was asked for
    generate_ns: Series | None
    phases: tuple[Phase, ...] = ()
    kv_cache: KvCache | None = None
    peak: Peak | None = None  # the device's peak, for each phase's roofline
    # allocated memory's peak above the start per phase ((phase, bytes); CUDA's allocator)
    peak_bytes: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        for name in ("ttft_ns", "itl_ns", "generate_ns"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Series):
                object.__setattr__(self, name, Series(value))

    @property
    def prefill_tokens_per_s(self) -> float | None:
        """Prompt tokens processed per second up to the first token (llama-bench's pp)."""
        t = self.ttft_ns.median if self.ttft_ns is not None else 0
        return self.prompt_tokens * self.batch / (t / 1e9) if t else None

    @property
    def decode_tokens_per_s(self) -> float | None:
        """New tokens per second once decoding (llama-bench's tg): batch / median ITL."""
        t = self.itl_ns.median if self.itl_ns is not None else 0
        return self.batch / (t / 1e9) if t else None

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    def itl_by_token(self) -> tuple[float, ...]:
        """The median inter-token latency at each token index (the gap before token 2,
        3, ...), over the timed generates: how a step grows with the context."""
        if self.itl_ns is None or self.itl_ns.values is None or self.new_tokens < 2:
            return ()
        gaps = self.itl_ns.values.tolist()
        per = self.new_tokens - 1
        if len(gaps) % per:
            return ()
        return tuple(median(gaps[i::per]) for i in range(per))

    @property
    def decode_outside_ns(self) -> float | None:
        """Of a decode step, the part outside the model's forward: the clean pass's median
        inter-token latency less the decode forward's median total (per-layer pass,
        wrapper cost removed): logits processing, sampling, cache bookkeeping. None
        without both."""
        decode = self.phase("decode")
        root = decode.layer("") if decode is not None else None
        if self.itl_ns is None or root is None:
            return None
        return self.itl_ns.median - root.total_ns


PREFILL, DECODE = "prefill", "decode"
#: An encoder-decoder's encoder, which ``generate()`` runs once before the first forward.
ENCODE = "encode"

#: One forward's phase: its name, and its token ids' tokens per sequence and batch (0, 0
#: when its input was no token ids).
PhaseTag = tuple[str, int, int]
#: What one forward shows the tagger: the phase named for it (None: none) and its token
#: ids' (tokens per sequence, batch) (None: its input was no batch x tokens integer tensor).
Sighting = tuple[str | None, tuple[int, int] | None]


def token_ids(shape: Sequence[int] | None, integer: bool) -> tuple[int, int] | None:
    """(tokens per sequence, batch) of a forward's input when it is token ids, a batch x
    tokens tensor of integers; None for anything else (floats, another rank)."""
    if shape is None or len(shape) != 2 or not integer:
        return None
    return int(shape[1]), int(shape[0])


def forward_phase(
    named: str | None, ids: tuple[int, int] | None, prefilled: bool
) -> PhaseTag | None:
    """The phase of one forward of a generate, the one rule of the Recorder, ``--generate``
    and a trace: the phase named for it (``rec.phase()``, a ``record_function`` mark);
    else, for token ids, prefill when they hold more than one token per sequence or when
    the generate has had no prefill yet (``prefilled``: its first forward takes the
    prompt, a one-token prompt too, such as a lone BOS), and decode for one token after
    it; None for a forward with neither."""
    tokens, batch = ids if ids is not None else (0, 0)
    if named is not None:
        return named, tokens, batch
    if ids is None:
        return None
    return (DECODE if prefilled and tokens <= 1 else PREFILL), tokens, batch


def tag_forwards(
    seen: Sequence[Sighting | None], starts: Container[int] = ()
) -> list[PhaseTag | None]:
    """Each forward's phase (``forward_phase``), in order. A generate begins at the first
    forward and at each index in ``starts`` (where the caller knows one begins: each of
    ``--generate``'s, an encoder-decoder's after its encoder ran); a prefill or decode
    forward, named or told by its ids, means the generate's prefill is behind it."""
    tags: list[PhaseTag | None] = []
    prefilled = False
    for k, sighting in enumerate(seen):
        if k in starts:
            prefilled = False
        tag = forward_phase(*sighting, prefilled) if sighting is not None else None
        if tag is not None and tag[0] in (PREFILL, DECODE):
            prefilled = True
        tags.append(tag)
    return tags


def is_generation(tags: Sequence[PhaseTag | None]) -> bool:
    """Whether tagged forwards make a generation section: a decode step, or a phase the
    user named (forwards that are all prefills are a model over token ids, such as a
    classifier's, whatever their lengths)."""
    return any(t is not None and t[0] != PREFILL for t in tags)


def assemble_generation(samples: Mapping[str, Any], tags: Sequence[PhaseTag | None]) -> Generation:
    """The generation section of per-iteration samples, each iteration's phase in ``tags``
    (None: no phase), built alike for the Recorder, ``--generate`` and a trace: each
    phase's layers (``phase_views``), the counts the tags give (prefills are generates,
    prefill and decode forwards new tokens; the prompt and batch their medians) and no
    clean-pass field (``--generate`` adds its time to first token, inter-token latency,
    KV cache and peaks; a trace its inter-token latency).

    A decode forward's context position is the tokens of its generate so far: the
    prefill's, one or more per decode step and a named phase's own; a forward whose
    token count is unknown (a named one without ids) has no position.
    """
    names: list[str | None] = []
    positions: list[float | None] = []
    seen = 0
    for tag in tags:
        name, tokens = (tag[0], tag[1]) if tag is not None else (None, 0)
        if name == PREFILL:
            seen = tokens
        elif name == DECODE:
            seen += max(tokens, 1)
        else:
            seen += tokens
        names.append(name)
        positions.append(float(seen) if tokens and name in (PREFILL, DECODE) else None)
    tagged = [t for t in tags if t is not None]
    prefill = [t for t in tagged if t[0] == PREFILL]
    decode = [t for t in tagged if t[0] == DECODE]
    prompt = int(median([t[1] for t in prefill])) if prefill else 0
    batch = int(median([t[2] for t in (prefill or decode)])) if (prefill or decode) else 0
    per_forward = {PREFILL: prompt * batch, DECODE: batch}
    for name in dict.fromkeys(t[0] for t in tagged if t[0] not in per_forward):
        per_forward[name] = int(median([t[1] * t[2] for t in tagged if t[0] == name]))
    return Generation(
        new_tokens=len(prefill) + len(decode), prompt_tokens=prompt, batch=batch,
        generates=len(prefill), ttft_ns=None, itl_ns=None, generate_ns=None,
        phases=phase_views(samples, names, positions, per_forward),
    )  # fmt: skip


def phase_views(
    samples: Mapping[str, Any],
    names: Sequence[str | None],
    positions: Sequence[float | None],
    tokens: Mapping[str, int],
    *,
    device: bool = False,
) -> tuple[Phase, ...]:
    """Per phase (in first-seen order), each layer's total and self per forward of that
    phase, and in decode its growth with the position. ``names`` and ``positions`` hold
    one entry per iteration of ``samples`` (None: a forward of no phase, or no known
    position); ``tokens``: tokens per forward of each phase. Shared by
    ``profile(..., generate=N)``, the Recorder around a user's own decode loop and
    the trace of a generate. ``device``: each layer's device times (the kernels it
    launched) instead of its host times; a layer without them is left out."""
    import numpy as np

    order = list(dict.fromkeys(n for n in names if n is not None))
    # each phase by its number: an array of strings drops trailing NULs, and "a" and
    # "a\x00" (two names) would merge
    number = {name: k for k, name in enumerate(order)}
    labels = np.array([number[n] if n is not None else -1 for n in names], dtype=np.int64)
    where = np.array([p if p is not None else np.nan for p in positions], dtype=np.float64)
    out = []
    for name in order:
        picked = np.flatnonzero(labels == number[name])
        layers = []
        for path, s in samples.items():
            total, self_ = _series(s, device)
            if total is None or self_ is None or len(total) != len(names):
                continue  # a layer not called once per forward: no per-forward split
            if not total[picked].any() and not self_[picked].any():
                continue  # not run in this phase (an encoder's layers while decoding)
            own = self_[picked].astype(np.float64)
            at = where[picked]
            growth = None
            known = ~np.isnan(at)
            if name == DECODE and known.sum() >= 3 and np.ptp(at[known]) > 0:
                growth = float(np.polyfit(at[known], own[known], 1)[0]) * 1000
            # integer samples take Summary's exact small path (bit for bit numpy's)
            summary = Summary.of(self_[picked] if self_.dtype == np.int64 else own.tolist())
            layers.append(
                PhaseLayer(
                    path=path,
                    total_ns=_median(total[picked]),
                    self_ns=float(summary.median),
                    self_summary=summary,
                    growth_ns_per_1k=growth,
                )
            )
        out.append(Phase(name, len(picked), tokens.get(name, 0), tuple(layers)))
    return tuple(out)


def _median(values: Any) -> float:
    """np.median of a numpy array; a few integers (below 2**52: their sums are exact) in
    Python, bit for bit the same without numpy's per-call cost (a merged replay has ~500
    layers)."""
    import numpy as np

    if values.dtype == np.int64 and 0 < len(values) <= SMALL_SUMMARY:
        s = sorted(values.tolist())
        k = len(s) // 2
        if max(-s[0], s[-1]) < 2**52:
            return float(s[k]) if len(s) % 2 else (s[k - 1] + s[k]) / 2
    return float(np.median(values))


def _series(s: Any, device: bool) -> tuple[Any, Any]:
    """A layer's per-iteration total and self times (numpy arrays or None) on one clock."""
    if not device:
        return s.total_ns.values, s.self_ns.values
    total, self_ = s.device_total_ns, s.device_self_ns
    if total is None or self_ is None:
        return None, None
    return total.values, self_.values
