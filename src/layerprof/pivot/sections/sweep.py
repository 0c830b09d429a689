"""One model over a grid of batch sizes, dtypes and thread counts (``layerprof sweep``).

Value objects only (no torch): ``layerprof.capture.sweep`` runs the grid, the
codec saves it as ``layerprof.sweep/1``, renderers show it. Times are integer
nanoseconds; memory in bytes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from layerprof.pivot.notes import Note
from layerprof.stats import Summary

OK = "ok"
OUT_OF_MEMORY = "out of memory"
SKIPPED = "skipped"
FAILED = "failed"
STATUSES = (OK, OUT_OF_MEMORY, SKIPPED, FAILED)
DEFAULT_ITERS = 20  # timed forwards per pass and point
DEFAULT_WARMUP = 3


@dataclass(frozen=True)
class SweepPoint:
    """One configuration and what it measured.

    ``batch`` is None when the batch was not varied (the inputs as given);
    ``threads`` None when not set (torch's default). ``status`` is ``ok``,
    ``out of memory`` (this point), ``skipped`` (a smaller batch of the same
    dtype and threads ran out of memory, so larger ones were not tried) or
    ``failed`` (``reason`` says why). ``latency`` is the clean pass;
    ``samples_per_s`` the batch over the median latency; ``peak_bytes`` how far
    allocated memory rose during one forward (activations and workspace);
    ``flops`` the counted forward FLOPs; ``shares`` each layer's share of the
    forward by self time (path, share), largest first.
    """

    batch: int | None
    dtype: str
    threads: int | None
    status: str = OK
    reason: str = ""
    latency: Summary | None = None
    samples_per_s: float | None = None
    peak_bytes: int | None = None
    flops: int | None = None
    shares: tuple[tuple[str, float], ...] = ()
    # a sweep of generate(): the prompt length (None: the inputs as given), the time to
    # first token and inter-token latency (clean pass), and the two rates
    prompt: int | None = None
    ttft: Summary | None = None
    itl: Summary | None = None
    prefill_tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None

    @property
    def label(self) -> str:
        """``prompt 128, batch 8, bfloat16, 2 threads`` (the parts that are set)."""
        return self._text(batch=True)

    @property
    def row_label(self) -> str:
        """``prompt 128, bfloat16, 2 threads``: the row of batches the point is in."""
        return self._text(batch=False)

    def _text(self, *, batch: bool) -> str:
        parts = [f"prompt {self.prompt}"] if self.prompt is not None else []
        parts += [f"batch {self.batch}"] if batch and self.batch is not None else []
        parts.append(self.dtype)
        if self.threads is not None:
            parts.append(f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        return ", ".join(parts)

    @property
    def in_group(self) -> str:
        """The point's place among its dtype's and thread count's: ``prompt 8, batch 1``
        (``share`` when neither is varied)."""
        parts = [f"prompt {self.prompt}"] if self.prompt is not None else []
        parts += [f"batch {self.batch}"] if self.batch is not None else []
        return ", ".join(parts) or "share"

    @property
    def flops_per_s(self) -> float | None:
        if self.flops is None or self.latency is None or self.latency.median <= 0:
            return None
        return self.flops / self.latency.median * 1e9


@dataclass(frozen=True)
class Sweep:
    """The grid's points in run order (dtype, then threads, then batch ascending).

    ``inputs`` are the ``--input`` specs as given; ``batch_dim`` the dimension
    of each spec the batch replaces; ``notes`` say what the numbers depend on
    (inputs left as they are, where a dimension stopped).
    """

    model: str
    device: str
    inputs: tuple[str, ...]
    batch_dim: int
    points: tuple[SweepPoint, ...]
    torch: str = ""
    host: str = ""
    created: str = ""
    warmup: int = 0
    iters: int = 0
    notes: tuple[Note, ...] = ()
    generate: int | None = None  # new tokens per generate (a sweep of generate())

    @property
    def batch_rows(self) -> tuple[tuple[SweepPoint, ...], ...]:
        """Points by row of batches (dtype, threads and prompt the same), in run order."""
        out: dict[tuple[str, int | None, int | None], list[SweepPoint]] = {}
        for p in self.points:
            out.setdefault((p.dtype, p.threads, p.prompt), []).append(p)
        return tuple(tuple(v) for v in out.values())

    @property
    def timed(self) -> str:
        """What each point times, for headers: ``3 timed forwards`` or ``3 timed generates``."""
        unit = "generates" if self.generate is not None else "forwards"
        return f"warm-up {self.warmup}, {self.iters} timed {unit}"

    @property
    def groups(self) -> dict[tuple[str, int | None], tuple[SweepPoint, ...]]:
        """Points by (dtype, threads), each group in batch order."""
        out: dict[tuple[str, int | None], list[SweepPoint]] = {}
        for p in self.points:
            out.setdefault((p.dtype, p.threads), []).append(p)
        return {k: tuple(v) for k, v in out.items()}


def top_layers(points: tuple[SweepPoint, ...], n: int) -> tuple[list[SweepPoint], list[str]]:
    """The points that measured layer shares, and the ``n`` layers with the largest share
    at any of them (largest first): what a share table of one group shows."""
    measured = [p for p in points if p.status == OK and p.shares]
    top: dict[str, float] = {}
    for p in measured:
        for path, share in p.shares:
            top[path] = max(top.get(path, 0.0), share)
    return measured, sorted(top, key=lambda k: -top[k])[:n]


#: Batching "pays" while doubling the batch raises decode tokens/s by at least this factor.
BATCH_PAYS = 1.2


def decode_scaling(points: tuple[SweepPoint, ...]) -> tuple[list[SweepPoint], int | None]:
    """The points of one (dtype, threads, prompt) row that measured decode tokens/s, in
    batch order, and the largest batch up to which each step up still raised decode
    tokens/s by ``BATCH_PAYS`` per doubling (None: fewer than two such points)."""
    measured = sorted(
        (p for p in points if p.decode_tokens_per_s and p.batch is not None),
        key=lambda p: p.batch or 0,
    )
    if len(measured) < 2:
        return measured, None
    pays = measured[0].batch
    for a, b in itertools.pairwise(measured):
        assert a.batch and b.batch and a.decode_tokens_per_s and b.decode_tokens_per_s
        need = BATCH_PAYS ** math.log2(b.batch / a.batch)  # per doubling of the batch
        if b.decode_tokens_per_s / a.decode_tokens_per_s < need:
            break
        pays = b.batch
    return measured, pays
