"""One model over a grid of batch sizes, dtypes and thread counts (``layerprof sweep``).

Value objects only (no torch): ``layerprof.capture.sweep`` runs the grid, the
codec saves it as ``layerprof.sweep/1``, renderers show it. Times are integer
nanoseconds; memory in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerprof.notes import Note
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

    @property
    def label(self) -> str:
        """``batch 8, bfloat16, 2 threads`` (the parts that are set)."""
        parts = [f"batch {self.batch}"] if self.batch is not None else []
        parts.append(self.dtype)
        if self.threads is not None:
            parts.append(f"{self.threads} thread{'s' if self.threads != 1 else ''}")
        return ", ".join(parts)

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
