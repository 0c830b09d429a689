"""The pivot: a Profile (one process, one rank) and a Run (several ranks).

Every source produces them and every sink reads them (see docs/architecture.md):
the live Recorder and the runner, ops mode, TorchScript / torch.export, and
Kineto traces fill the sections they know; everything else stays empty.

* meta, latency (the clean pass; for a trace the step times) and overhead;
* layers: static ``LayerInfo`` rows plus per-iteration ``LayerSamples``;
  ``rows()`` and ``tree()`` derive per-layer statistics on demand;
* ops: per-iteration operator rows (``OpStat``), forward and backward;
* trace (for traces and ops mode, a :class:`TraceSections`; empty for a live run):
  where the trace came from (``source``), steps, devices (GPU busy/idle), kernels,
  kernel kinds, memcpy, launches, memory, record_function annotations and, across a
  step, its breakdown, communication, queues and memory timeline, each read through
  it (``profile.trace.kernels``);
* flops: the model's counted FLOPs, their coverage and the device's peak
  (per layer in ``LayerInfo.flops``/``flop_detail``);
* compiled (``--compile``): how the compiled kernels' time was attributed;
* signatures: the distinct input shapes a Recorder saw, with forwards and
  layer shapes per signature;
* passes: for live runs, whether the per-layer pass ran the clean pass's code
  (fused fast paths, modules called in one pass only);
* repeats (``run --repeat N``, ``diff --run``): the medians of every separate
  process, the run-to-run spread a diff judges changes against;
* activation_memory (``--backward``): the bytes each layer's forward saves for
  backward, with its parameter, gradient and optimizer-state bytes;
* loop: a user's training loop recorded with ``Recorder(model, backward=True)``:
  each step's anatomy (data wait, forward, backward, optimizer, rest) and each
  layer's forward and backward per step;
* notes: facts the user should read next to the numbers.

A Profile is frozen, like a Run and a Diff: a change is a new Profile
(``dataclasses.replace``, ``with_trace``, ``with_notes``), and what it derives from
its fields (``rows()``) is computed once per Profile.

Nothing here imports torch or a renderer: saving, loading and rendering go through
``layerprof.sinks`` (see ``Profile.save``), which imports the codec where it runs
and has the renderers registered by the package when it is imported.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from layerprof import sinks
from layerprof.errors import UsageError
from layerprof.pivot.notes import Note
from layerprof.pivot.records import LayerInfo, LayerSamples, Meta, OpStat, Overhead
from layerprof.stats import Series, SeriesLike, Summary, as_series
from layerprof.units import NS_PER_MS

if TYPE_CHECKING:
    import pandas

    from layerprof.pivot.sections.compiled import CompiledSection
    from layerprof.pivot.sections.distributed import (
        Breakdown,
        Communication,
        MemoryTimeline,
        Queues,
        Stragglers,
    )
    from layerprof.pivot.sections.flops import FlopSummary, LayerFlops
    from layerprof.pivot.sections.generation import Generation
    from layerprof.pivot.sections.inputs import InputSignature
    from layerprof.pivot.sections.loop import TrainingLoop
    from layerprof.pivot.sections.memory import ActivationMemory
    from layerprof.pivot.sections.passes import PassCheck
    from layerprof.pivot.sections.ranks import LayerAcrossRanks
    from layerprof.pivot.sections.repeats import Repeats
    from layerprof.pivot.sections.replay import GraphReplay
    from layerprof.pivot.sections.serving import Serving
    from layerprof.pivot.sections.stepwork import DeviceWork
    from layerprof.pivot.sections.trace import (
        AllocatorSummary,
        AnnotationRow,
        CrossRank,
        DeviceUse,
        KernelRow,
        KindRow,
        Launches,
        MemcpyRow,
        Steps,
        TraceSource,
    )


class _RecordedTrace(Protocol):
    """The raw trace behind an ops-mode Profile (its Chrome-trace events), for exports."""

    @property
    def trace_events(self) -> list[dict[str, Any]]: ...

    def trace_metadata(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TraceSections:
    """What a torch.profiler trace gives a Profile beyond its layers and operators
    (``analyze``, and ops mode's own trace), read as ``profile.trace.kernels``: one
    value, empty (:data:`NO_TRACE`) for a live run's Profile."""

    source: TraceSource | None = None
    steps: Steps | None = None
    devices: tuple[DeviceUse, ...] = ()
    kernels: tuple[KernelRow, ...] = ()
    kinds: tuple[KindRow, ...] = ()
    memcpy: tuple[MemcpyRow, ...] = ()
    launches: Launches | None = None
    memory: AllocatorSummary | None = None
    annotations: tuple[AnnotationRow, ...] = ()
    breakdown: Breakdown | None = None
    communication: Communication | None = None
    queues: Queues | None = None
    memory_timeline: MemoryTimeline | None = None
    device_work: DeviceWork | None = None
    serving: Serving | None = None


#: The trace sections of a Profile without a trace (a live run without ops mode).
NO_TRACE = TraceSections()


@dataclass(frozen=True)
class LayerRow:
    """Derived per-layer statistics (times per forward, ns).

    ``self_ns`` is the median over iterations of the layer's self time (the
    mean when the layer's number of calls varies between iterations);
    ``total_ns`` is ``self_ns`` plus the children's ``total_ns`` (see
    ``_subtree_totals``); ``total`` summarizes the measured totals and
    ``self_summary`` the self times (with the median's confidence interval).
    """

    path: str
    type: str
    parent: str | None
    depth: int
    calls: float
    total_ns: float
    self_ns: float
    total: Summary | None
    self_summary: Summary | None
    share: float
    params: int
    params_own: int
    input_shapes: Any
    output_shapes: Any
    device_total_ns: float | None = None
    device_self_ns: float | None = None
    backward_total_ns: float | None = None
    backward_self_ns: float | None = None
    calls_vary: bool = False
    flops: int | None = None
    output_bytes: int | None = None
    peak_bytes: int | None = None
    flop_detail: LayerFlops | None = None

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1] if self.path else self.type

    @property
    def total_ms(self) -> float:
        """``total_ns`` in milliseconds, as the JSON's ``total_ms``."""
        return self.total_ns / NS_PER_MS

    @property
    def self_ms(self) -> float:
        """``self_ns`` in milliseconds, as the JSON's ``self_ms``."""
        return self.self_ns / NS_PER_MS

    @property
    def backward_total_ms(self) -> float | None:
        """``backward_total_ns`` in milliseconds (None without --backward), as the JSON's."""
        return None if self.backward_total_ns is None else self.backward_total_ns / NS_PER_MS

    @property
    def backward_self_ms(self) -> float | None:
        """``backward_self_ns`` in milliseconds (None without --backward), as the JSON's."""
        return None if self.backward_self_ns is None else self.backward_self_ns / NS_PER_MS


@dataclass
class LayerNode:
    """A row with its children, for tree renderers and invariant checks."""

    row: LayerRow
    children: list[LayerNode] = field(default_factory=list)

    def walk(self) -> Iterator[LayerNode]:
        yield self
        for child in self.children:
            yield from child.walk()

    def self_check(self, tolerance_ns: float = 0.0) -> None:
        """Assert the tree invariant: self >= 0 and total == self + sum(children)."""
        for node in self.walk():
            row = node.row
            kids = sum(c.row.total_ns for c in node.children)
            gap = row.total_ns - row.self_ns - kids
            assert abs(gap) <= tolerance_ns, (
                f"{row.path or row.type}: total {row.total_ns} != self {row.self_ns}"
                f" + children {kids} (gap {gap})"
            )
            assert row.self_ns >= -tolerance_ns, f"{row.path or row.type}: self {row.self_ns} < 0"


def _subtree_totals(rows: list[LayerRow]) -> list[LayerRow]:
    """Set every row's total to its median self time plus its children's totals.

    Medians are not additive: under noisy scheduling the median of a parent's
    measured totals and the sum of its children's medians can differ by a lot.
    Building totals bottom-up from robust per-layer self medians makes the tree
    add up exactly and keeps every number robust to outlier iterations; the
    measured totals' own median stays in ``LayerRow.total`` (``total_spread_ms``).
    Never-called containers (ModuleList, ModuleDict) get the sum of their
    children this way too.
    """
    paths = {r.path for r in rows}
    kids: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if r.parent is not None and r.parent in paths:
            kids.setdefault(r.parent, []).append(i)
    for i in _children_first(rows, kids):
        r = rows[i]
        children = kids.get(r.path, ())
        total = r.self_ns + sum(rows[k].total_ns for k in children)
        dev = _add_opt(r.device_self_ns, [rows[k].device_total_ns for k in children])
        bwd = _add_opt(r.backward_self_ns, [rows[k].backward_total_ns for k in children])
        rows[i] = replace(r, total_ns=total, device_total_ns=dev, backward_total_ns=bwd)
    # A root is a row without a parent among the rows (as in ``Profile.tree``).
    roots_total = sum(r.total_ns for r in rows if r.parent is None or r.parent not in paths)
    return [replace(r, share=r.total_ns / roots_total if roots_total > 0 else 0.0) for r in rows]


def _children_first(rows: list[LayerRow], kids: dict[str, list[int]]) -> list[int]:
    """Row indices in post-order, whatever order the rows came in (traces need not
    list parents first); a cycle in the parent links is visited once."""
    order: list[int] = []
    seen: set[int] = set()
    for start in range(len(rows)):
        stack = [(start, False)]
        while stack:
            i, expanded = stack.pop()
            if expanded:
                order.append(i)
                continue
            if i in seen:
                continue
            seen.add(i)
            stack.append((i, True))
            stack.extend((k, False) for k in kids.get(rows[i].path, ()) if k not in seen)
    return order


def _add_opt(own: float | None, children: list[float | None]) -> float | None:
    values = [v for v in (own, *children) if v is not None]
    return sum(values) if values else None


def tree_of(rows: Sequence[LayerRow]) -> list[LayerNode]:
    """The module tree of ``rows`` (roots first), built from their parent paths."""
    nodes = {row.path: LayerNode(row) for row in rows}
    roots: list[LayerNode] = []
    for node in nodes.values():
        parent = node.row.parent
        if parent is not None and parent in nodes and parent != node.row.path:
            nodes[parent].children.append(node)
        else:
            roots.append(node)
    return roots


def _depth_of(path: str) -> int:
    return 0 if path == "" else path.count(".") + 1


def parent_path(path: str) -> str | None:
    """The structural parent of a module path: ``a.b.c`` -> ``a.b``, ``a`` -> ``""``, root -> None."""
    if path == "":
        return None
    return path.rsplit(".", 1)[0] if "." in path else ""


def ancestors(path: str) -> Iterator[str]:
    """``a.b.c`` -> ``a.b``, ``a``, ``""``; the root has none."""
    while path:
        path = path.rsplit(".", 1)[0] if "." in path else ""
        yield path


def _med(series: Series | None) -> float | None:
    return series.median if series is not None else None


def _mean(series: Series | None) -> float | None:
    return series.mean if series is not None else None


@dataclass(frozen=True)
class Profile(sinks.Output):
    """Everything one profiling run (or one rank of an analyzed trace) produced.

    ``latency_ns`` holds the clean pass's whole-forward times (for a trace,
    the complete steps' durations); sequences are accepted and turned into a
    :class:`~layerprof.stats.Series`. ``events`` is the raw trace behind ops
    mode (for trace exports); it is never saved. Frozen: a changed Profile is a new
    one (``dataclasses.replace``), so rows derived from its fields stay true; keep
    ``samples`` as built (the mapping itself is not frozen).
    """

    meta: Meta
    layers: tuple[LayerInfo, ...] = ()
    samples: dict[str, LayerSamples] = field(default_factory=dict)
    latency_ns: Series | None = None
    first_ns: int | None = None
    overhead: Overhead | None = None
    ops: tuple[OpStat, ...] = ()
    notes: tuple[Note, ...] = ()
    trace: TraceSections = NO_TRACE  # traces and ops mode: steps, devices, kernels, ...
    signatures: tuple[InputSignature, ...] = ()
    passes: PassCheck | None = None  # live runs: did the per-layer pass run the clean code?
    flops: FlopSummary | None = None
    compiled: CompiledSection | None = None
    repeats: Repeats | None = None  # run --repeat / diff --run: one set of medians per process
    activation_memory: ActivationMemory | None = None  # --backward: saved bytes per layer
    loop: TrainingLoop | None = None  # a training loop's steps (Recorder with backward=True)
    generation: Generation | None = None  # generate(): prefill and decode apart
    graph_replay: GraphReplay | None = None  # analyze --capture: a graph replay's layers
    events: _RecordedTrace | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        latency: SeriesLike | None = self.latency_ns
        # the one normalization of a frozen value, before anything reads it
        object.__setattr__(self, "latency_ns", as_series(latency))

    def with_trace(self, **sections: Any) -> Profile:
        """A copy with these of its trace's sections replaced (``source=``, ``kernels=``...)."""
        return replace(self, trace=replace(self.trace, **sections))

    def __repr__(self) -> str:
        lat = self.latency
        latency = f"latency median {lat.median_ms:.3f} ms (n={lat.n})" if lat else "no latency"
        timed = sum(1 for s in self.samples.values() if s.calls)
        return (
            f"<Profile {self.meta.model or '?'} on {self.meta.device}: {latency},"
            f" {len(self.layers)} layers ({timed} timed), {len(self.ops)} op rows>"
        )

    # ---- derived --------------------------------------------------------
    @property
    def latency(self) -> Summary | None:
        """The clean pass's whole-forward times (nanoseconds; ``.median_ms`` for ms)."""
        return self.latency_ns.summary if self.latency_ns is not None else None

    @property
    def rank(self) -> int | None:
        """The rank this profile belongs to (a trace's, or torchrun's), if known."""
        if self.trace.source is not None:
            return self.trace.source.rank
        rank = self.meta.extra.get("rank")
        return rank if isinstance(rank, int) and not isinstance(rank, bool) else None

    @property
    def has_device(self) -> bool:
        """Whether device (GPU) times were recorded."""
        if self.trace.source is not None:
            return self.trace.source.has_device
        return bool(self.trace.devices) or any(
            s.device_total_ns is not None for s in self.samples.values()
        )

    def rows(self) -> list[LayerRow]:
        """One row per layer, in module order: a new list each call, of rows derived
        once per Profile (a report reads the rows a dozen times; at 1,000 layers each
        derivation takes ~45 ms)."""
        return list(self._rows)

    @cached_property
    def _rows(self) -> tuple[LayerRow, ...]:
        # Kept in the instance's __dict__, beside the fields: equality, replace() and
        # a pickle (below) skip it, and a replaced Profile derives its own.
        return tuple(self._derived_rows())

    def __getstate__(self) -> dict[str, Any]:
        """A pickle (a worker's result) carries the fields, not the derived rows."""
        return {k: v for k, v in self.__dict__.items() if k != "_rows"}

    def _derived_rows(self) -> list[LayerRow]:
        out: list[LayerRow] = []
        for info in self.layers:
            s = self.samples.get(info.path)
            # A layer called in only some iterations has a mixture of zeros and
            # real times: its per-forward cost is the mean, not the median.
            mid = _mean if s is not None and s.calls_vary else _med
            out.append(
                LayerRow(
                    path=info.path,
                    type=info.type,
                    parent=info.parent,
                    depth=_depth_of(info.path),
                    calls=s.calls if s else 0.0,
                    total_ns=0.0,  # set bottom-up by _subtree_totals
                    self_ns=(mid(s.self_ns) or 0.0) if s else 0.0,
                    total=s.total_ns.summary if s else None,
                    self_summary=s.self_ns.summary if s else None,
                    share=0.0,
                    params=info.params,
                    params_own=info.params_own,
                    input_shapes=info.input_shapes,
                    output_shapes=info.output_shapes,
                    device_total_ns=mid(s.device_total_ns) if s else None,
                    device_self_ns=mid(s.device_self_ns) if s else None,
                    backward_total_ns=mid(s.backward_total_ns) if s else None,
                    backward_self_ns=mid(s.backward_self_ns) if s else None,
                    calls_vary=s.calls_vary if s else False,
                    flops=info.flops,
                    output_bytes=info.output_bytes,
                    peak_bytes=info.peak_bytes,
                    flop_detail=info.flop_detail,
                )
            )
        return _subtree_totals(out)

    def tree(self) -> list[LayerNode]:
        """The module tree (roots first), built from the rows' parent paths."""
        return tree_of(self.rows())

    def row(self, path: str) -> LayerRow:
        for r in self.rows():
            if r.path == path:
                return r
        raise KeyError(path)

    def op(self, name: str, *, layer: str | None = None, phase: str = "forward") -> OpStat:
        """The operator ``name`` (``aten::addmm``) of ``phase``: in ``layer`` when given,
        else summed over layers and input shapes, as the "operators (all layers)" table
        sums them. KeyError when no such operator ran."""
        rows = [
            o
            for o in self.ops
            if o.name == name and o.phase == phase and (layer is None or o.layer == layer)
        ]
        if not rows:
            raise KeyError(name if layer is None else f"{name} in {layer!r}")
        if len(rows) == 1:
            return rows[0]
        shapes = {o.input_shapes for o in rows}
        optional = ("device_ns", "cpu_mem_bytes", "self_cpu_mem_bytes", "device_mem_bytes",
                    "self_device_mem_bytes", "flops")  # fmt: skip
        sums: dict[str, Any] = {}
        for key in optional:
            values = [getattr(o, key) for o in rows if getattr(o, key) is not None]
            sums[key] = sum(values) if values else None
        return replace(
            rows[0],
            calls=sum(o.calls for o in rows),
            self_ns=sum(o.self_ns for o in rows),
            total_ns=sum(o.total_ns for o in rows),
            layer=layer,
            input_shapes=shapes.pop() if len(shapes) == 1 else None,
            samples=None,
            **sums,
        )

    def with_notes(self, *notes: Note) -> Profile:
        """The profile with ``notes`` added after its own."""
        return replace(self, notes=(*self.notes, *notes))

    # ---- sinks (through layerprof.sinks: no codec or renderer import here) ----
    def to_dict(self, *, samples: bool = False) -> dict[str, Any]:
        """The ``layerprof.profile`` JSON document (per-iteration samples with ``samples``)."""
        return sinks.to_dict(self, samples=samples)

    def save(self, path: str | os.PathLike[str], *, samples: bool = False) -> Path:
        """Write the profile as JSON (whole or not at all); ``samples`` keeps every iteration."""
        return sinks.save(self, path, samples=samples)

    def to_dataframe(self) -> pandas.DataFrame:
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise UsageError(
                "to_dataframe() needs pandas", hint="pip install 'layerprof[pandas]'"
            ) from exc
        return pd.DataFrame(sinks.layer_records(self))


@dataclass(frozen=True)
class Run(sinks.Output):
    """Several ranks of one job (a directory of per-rank traces, or per-rank profiles).

    ``ranks`` are Profiles sorted by rank; ``cross`` compares them;
    ``rank_source`` says how each file's rank was found; ``skipped`` lists
    files that were not traces (with why); ``failed`` the traces that failed and
    were left out of the merge (``--partial``), each with why; ``notes`` are facts
    about the set;
    ``layer_ranks`` is each layer's time per forward on every rank.
    """

    path: str
    ranks: tuple[Profile, ...]
    rank_source: str = "file order"
    cross: CrossRank | None = None
    skipped: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    notes: tuple[Note, ...] = ()
    layer_ranks: tuple[LayerAcrossRanks, ...] = ()
    stragglers: Stragglers | None = None

    def __repr__(self) -> str:
        ranks = ", ".join(str(p.rank) for p in self.ranks)
        return f"<Run {self.path}: {len(self.ranks)} rank(s) [{ranks}]>"

    @property
    def step_word(self) -> str:
        """What a rank's "median step" is: ``forward`` for live rank profiles (their
        latency: one clean forward), ``step`` for traces (a whole ProfilerStep)."""
        live = bool(self.ranks) and all(p.meta.source == "layerprof.run" for p in self.ranks)
        return "forward" if live else "step"

    def rank(self, rank: int | None = None) -> Profile:
        """The profile of ``rank`` (default: the lowest rank)."""
        if not self.ranks:
            raise UsageError(f"{self.path}: no ranks")
        if rank is None:
            return min(self.ranks, key=lambda p: p.rank if p.rank is not None else 0)
        for p in self.ranks:
            if p.rank == rank:
                return p
        known = ", ".join(str(p.rank) for p in self.ranks)
        raise UsageError(f"no rank {rank} in {self.path} (ranks: {known})")

    def to_dict(self, *, samples: bool = False, top: int | None = None) -> dict[str, Any]:
        return sinks.to_dict(self, samples=samples, top=top)

    def save(self, path: str | os.PathLike[str], *, samples: bool = False) -> Path:
        return sinks.save(self, path, samples=samples)


def rank_order(profiles: Sequence[Profile]) -> tuple[Profile, ...]:
    return tuple(sorted(profiles, key=lambda p: p.rank if p.rank is not None else 0))


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
