"""TraceReport: every analysis of one or more trace files, and its two sinks.

``to_dict`` is the ``layerprof.trace/1`` JSON contract (times in ms floats);
``to_profile`` turns one rank into the shared Profile pivot so the console,
diff and HTML sinks work on traces too. Inside, times are integer ns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprof.errors import UsageError
from layerprof.profile import Profile, now_iso
from layerprof.records import LayerInfo, LayerSamples, Meta, OpStat
from layerprof.stats import Summary, median
from layerprof.trace.gpu import DeviceUse, KernelRow, KindRow, Launches, MemcpyRow
from layerprof.trace.memory import MemorySummary
from layerprof.trace.modules import TreeRow
from layerprof.trace.ops import OpRow
from layerprof.trace.ranks import CrossRank
from layerprof.trace.steps import Steps

SCHEMA = "layerprof.trace/1"
NS_PER_MS = 1_000_000
_TRACE_SUFFIX = re.compile(r"(\.pt\.trace)?\.json(\.gz)?$")


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def _top(rows: tuple[Any, ...], top: int | None) -> tuple[Any, ...]:
    return rows if top is None else rows[: max(top, 0)]


@dataclass(frozen=True)
class RankReport:
    """All analyses of one trace file (one rank)."""

    rank: int
    file: str
    events: int
    steps: Steps
    devices: tuple[DeviceUse, ...]
    ops: tuple[OpRow, ...]
    kernels: tuple[KernelRow, ...]
    kinds: tuple[KindRow, ...]
    memcpy: tuple[MemcpyRow, ...]
    launches: Launches | None
    modules: tuple[TreeRow, ...]
    annotations: tuple[TreeRow, ...]
    memory: MemorySummary | None
    window_ns: int
    has_device: bool
    device_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    module_source: str | None = None  # "layerprof_layer" | "nn.Module" | None (no module tree)
    # The ops starting inside complete steps (whole trace when there is none), for to_profile.
    step_ops: tuple[OpRow, ...] | None = None
    producer: dict[str, Any] | None = None  # {"version", "model"} when layerprof wrote the trace
    run: dict[str, Any] = field(default_factory=dict)  # the run's meta from layerprof's marker
    module_types: dict[str, str] = field(default_factory=dict)  # the run's path -> class
    # What the trace says about the device: "cuda", "mtia", "xpu", "hpu", "cpu" (no
    # device events at all), or None (device events of an unknown platform).
    device_kind: str | None = None

    @property
    def step_summary(self) -> Summary | None:
        done = self.steps.complete
        return Summary.of([s.dur_ns for s in done]) if done else None

    @property
    def model(self) -> str:
        named = (self.producer or {}).get("model")
        if isinstance(named, str) and named:
            return named
        return _TRACE_SUFFIX.sub("", Path(self.file).name) or Path(self.file).name

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        summary = self.step_summary
        return {
            "rank": self.rank,
            "file": self.file,
            "events": self.events,
            "has_device_data": self.has_device,
            "device_names": list(self.device_names),
            "step_source": self.steps.source,
            "module_source": self.module_source,
            "layerprof": self.producer,
            "steps": [
                {"name": s.name, "ms": s.dur_ns / NS_PER_MS, "cut_off": s.cut_off}
                for s in self.steps.steps
            ],
            "step_ms": (
                {k: v for k, v in summary.scaled(1 / NS_PER_MS).items()} if summary else None
            ),
            "window_ms": self.window_ns / NS_PER_MS,
            "devices": [_device(d) for d in self.devices],
            "ops": [_op(o, self.has_device) for o in _top(self.ops, top)],
            "kernels": [_kernel(k) for k in _top(self.kernels, top)],
            "kernel_kinds": [
                {"kind": k.kind, "calls": k.calls, "total_ms": k.total_ns / NS_PER_MS}
                for k in self.kinds
            ],
            "memcpy": [_memcpy(m) for m in self.memcpy],
            "launch": _launches(self.launches, top),
            "modules": [_tree(r) for r in self.modules],
            "annotations": [_tree(r) for r in self.annotations],
            "memory": _memory(self.memory, top),
            "notes": list(self.notes),
        }

    def to_profile(self) -> Profile:
        done = self.steps.complete
        n = len(done)
        rows = self.modules or self.annotations
        layers: list[LayerInfo] = []
        samples: dict[str, LayerSamples] = {}
        if rows and self.module_source == "layerprof_layer":
            layers = _layer_infos(self.modules, self.module_types)
            samples = {r.path: _samples(r, n) for r in self.modules}
        elif rows:
            for r in rows:
                layers.append(LayerInfo(path=r.path, type=r.type, parent=r.parent))
                samples[r.path] = _samples(r, n)
        else:
            path = self.steps.source.replace(".", "_")
            layers.append(LayerInfo(path=path, type="step", parent=None))
            durations = tuple(s.dur_ns for s in done) or (self.window_ns,)
            samples[path] = LayerSamples(total_ns=durations, self_ns=durations, calls=1.0)
        # Only what the trace says: a trace has no dtype, and a device only when known.
        meta = Meta(
            **{"dtype": "", **_run_meta(self.run)},
            model=self.model,
            device=self.device_kind or "",
            iters=n,
            source="trace",
            created=now_iso(),
            note=f"steps: {self.steps.source}",
            extra={
                "file": self.file,
                "rank": self.rank,
                "step_source": self.steps.source,
                "module_source": self.module_source,
                **({"layerprof": self.producer} if self.producer else {}),
            },
        )
        # Profile ops are per iteration: the ops inside complete steps, over their number.
        per_step = self.step_ops is not None and n > 0
        per = n if per_step else 1
        ops = tuple(
            OpStat(
                name=o.name,
                # an op seen in some steps only still ran: never show 0 calls
                calls=max(round(o.calls / per), 1 if o.calls else 0),
                self_ns=round(o.self_ns / per),
                total_ns=round(o.total_ns / per),
                device_ns=round(o.device_ns / per) if self.has_device else None,
                input_shapes=o.input_shapes,
            )
            for o in (self.step_ops or () if per_step else self.ops)
        )
        return Profile(
            meta=meta,
            layers=tuple(layers),
            samples=samples,
            latency_ns=tuple(s.dur_ns for s in done),
            ops=ops,
            notes=self.notes,
        )


def _run_meta(run: dict[str, Any]) -> dict[str, Any]:
    """Meta fields a layerprof trace carries about its run (type-checked, others dropped)."""
    out: dict[str, Any] = {}
    for key in ("dtype", "torch", "mode", "host"):
        if isinstance(run.get(key), str):
            out[key] = run[key]
    threads = run.get("threads")
    if isinstance(threads, int) and not isinstance(threads, bool):
        out["threads"] = threads
    if isinstance(run.get("grad"), bool):
        out["grad"] = run["grad"]
    inputs = run.get("inputs")
    if isinstance(inputs, list) and all(isinstance(i, str) for i in inputs):
        out["inputs"] = tuple(inputs)
    return out


def _layer_infos(rows: tuple[TreeRow, ...], types: dict[str, str]) -> list[LayerInfo]:
    """The run's layer table from a layerprof trace: structural parents, like ``layer_infos``.

    ``types`` (the trace's ``module_types``, module order) adds the modules
    that were never called (``ModuleList`` containers); paths only seen in
    spans follow, parented to their nearest known ancestor path.
    """
    known = {r.path: r for r in rows}
    order = [*types, *(p for p in known if p not in types)]
    present = set(order)
    out: list[LayerInfo] = []
    for path in order:
        row = known.get(path)
        type_ = types.get(path) or (row.type if row is not None else "layer")
        out.append(LayerInfo(path=path, type=type_, parent=_nearest_ancestor(path, present)))
    return out


def _nearest_ancestor(path: str, present: set[str]) -> str | None:
    while path:
        path = path.rsplit(".", 1)[0] if "." in path else ""
        if path in present:
            return path
    return None


def _samples(r: TreeRow, n_steps: int) -> LayerSamples:
    if n_steps == 0:  # no complete step: the whole trace is one sample
        return LayerSamples(
            total_ns=(r.total_ns,),
            self_ns=(r.self_ns,),
            calls=float(r.calls),
            device_total_ns=None if r.device_ns is None else (r.device_ns,),
            device_self_ns=None if r.device_self_ns is None else (r.device_self_ns,),
        )
    return LayerSamples(
        total_ns=r.step_total_ns,
        self_ns=r.step_self_ns,
        calls=float(median(r.step_calls)),
        device_total_ns=r.step_device_ns,
        device_self_ns=r.step_device_self_ns,
    )


@dataclass(frozen=True)
class TraceReport:
    """The analysis of a trace file or a directory of per-rank trace files."""

    path: str
    ranks: tuple[RankReport, ...]
    rank_source: str  # "distributedInfo.rank" | "file name (rank-N / rank_N)" | "file order"
    cross: CrossRank | None
    skipped: tuple[str, ...] = ()  # files in a directory that were not traces, with why

    def rank(self, rank: int | None = None) -> RankReport:
        if rank is None:
            return min(self.ranks, key=lambda r: r.rank)
        for r in self.ranks:
            if r.rank == rank:
                return r
        known = ", ".join(str(r.rank) for r in self.ranks)
        raise UsageError(f"no rank {rank} in {self.path} (ranks: {known})")

    def to_profile(self, rank: int | None = None) -> Profile:
        return self.rank(rank).to_profile()

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "path": self.path,
            "rank_source": self.rank_source,
            "skipped": list(self.skipped),
            "ranks": [r.to_dict(top) for r in self.ranks],
            "cross_rank": None,
        }
        if self.cross is not None:
            c = self.cross
            out["cross_rank"] = {
                "slowest_rank": c.slowest_rank,
                "ranks": [
                    {
                        "rank": line.rank,
                        "median_step_ms": _ms(line.median_step_ns),
                        "communication_ms": line.communication_ns / NS_PER_MS,
                        "compute_ms": line.compute_ns / NS_PER_MS,
                    }
                    for line in c.ranks
                ],
                "steps": [
                    {
                        "name": s.name,
                        "ms_by_rank": {str(r): ns / NS_PER_MS for r, ns in s.ns_by_rank},
                        "slowest_rank": s.slowest_rank,
                        "spread_ms": s.spread_ns / NS_PER_MS,
                    }
                    for s in c.steps
                ],
            }
        return out


def _device(d: DeviceUse) -> dict[str, Any]:
    return {
        "device": d.device,
        "busy_ms": d.busy_ns / NS_PER_MS,
        "busy_in_window_ms": d.busy_in_window_ns / NS_PER_MS,
        "idle_ms": d.idle_ns / NS_PER_MS,
        "window_ms": d.window_ns / NS_PER_MS,
        "utilization": d.utilization,
        "kernel_ms": d.kernel_ns / NS_PER_MS,
        "memcpy_ms": d.memcpy_ns / NS_PER_MS,
        "memset_ms": d.memset_ns / NS_PER_MS,
        "streams": d.streams,
        "idle_breakdown_ms": {
            "host_wait": d.host_wait_ns / NS_PER_MS,
            "short_gap": d.short_gap_ns / NS_PER_MS,
            "other": d.other_idle_ns / NS_PER_MS,
        },
    }


def _op(o: OpRow, has_device: bool) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": o.name,
        "calls": o.calls,
        "self_ms": o.self_ns / NS_PER_MS,
        "total_ms": o.total_ns / NS_PER_MS,
        "device_ms": o.device_ns / NS_PER_MS if has_device else None,
        "device_self_ms": o.device_self_ns / NS_PER_MS if has_device else None,
    }
    if o.input_shapes is not None:
        d["input_shapes"] = o.input_shapes
    return d


def _kernel(k: KernelRow) -> dict[str, Any]:
    return {
        "name": k.name,
        "kind": k.kind,
        "calls": k.calls,
        "total_ms": k.total_ns / NS_PER_MS,
        "mean_ms": k.mean_ns / NS_PER_MS,
        "min_ms": k.min_ns / NS_PER_MS,
        "max_ms": k.max_ns / NS_PER_MS,
    }


def _memcpy(m: MemcpyRow) -> dict[str, Any]:
    return {
        "kind": m.kind,
        "calls": m.calls,
        "total_ms": m.total_ns / NS_PER_MS,
        "bytes": m.bytes,
        "gb_per_s": m.gb_per_s,
    }


def _summary_us(s: Summary | None) -> dict[str, float | int] | None:
    return None if s is None else s.scaled(1 / 1000)


def _launches(launch: Launches | None, top: int | None) -> dict[str, Any] | None:
    if launch is None:
        return None
    return {
        "launches": launch.launches,
        "call_total_ms": launch.call_total_ns / NS_PER_MS,
        "call_us": _summary_us(launch.call_ns),
        "delay_us": _summary_us(launch.delay_ns),
        "negative_delays": launch.negative_delays,
        "unmatched_device_ops": launch.unmatched_device_ops,
        "sync_ms": launch.sync_ns / NS_PER_MS,
        "runtime": [
            {"name": r.name, "calls": r.calls, "total_ms": r.total_ns / NS_PER_MS}
            for r in _top(launch.runtime, top)
        ],
    }


def _tree(r: TreeRow) -> dict[str, Any]:
    return {
        "path": r.path,
        "name": r.name,
        "type": r.type,
        "parent": r.parent,
        "calls": r.calls,
        "total_ms": r.total_ns / NS_PER_MS,
        "self_ms": r.self_ns / NS_PER_MS,
        "device_ms": _ms(r.device_ns),
        "device_self_ms": _ms(r.device_self_ns),
        "step_total_ms": [v / NS_PER_MS for v in r.step_total_ns],
    }


def _memory(m: MemorySummary | None, top: int | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "devices": [
            {
                "device": d.device,
                "peak_allocated_bytes": d.peak_allocated,
                "allocations": d.allocations,
                "allocated_bytes": d.allocated_bytes,
                "freed_bytes": d.freed_bytes,
            }
            for d in m.devices
        ],
        "top_ops": [
            {"op": r.op, "allocations": r.allocations, "bytes": r.bytes}
            for r in _top(m.top_ops, top)
        ],
    }
