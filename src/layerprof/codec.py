"""The one JSON codec: every ``to_dict``/``from_dict`` of layerprof's three schemas.

=========================  ===========================================================
``layerprof.profile/2``    a Profile: meta, latency, overhead, layers, ops, trace sections
``layerprof.trace/2``      a Run: ranks (each a profile/2 document), cross-rank results
``layerprof.diff/1``       a Diff: latency, steps, layers, ops, kernels; settings; gate
=========================  ===========================================================

Files written by layerprof 0.1.0 (``layerprof.profile/1``, ``layerprof.trace/1``)
still load: a profile/1 document is read field for field; a trace/1 document
kept only whole-trace sums per layer and operator, so its per-step numbers are
those sums divided by the steps, and the loaded run says so in a note.

Times are integer ns inside and ms (``*_ms``) / µs (``*_us``) in JSON. Per-
iteration samples are written only when asked (``samples=True``); a summary
(median, mean, p90, p99, min, max, std, n, MAD and the median's confidence
interval) always is, so a summary-only file still diffs (``diff`` then judges
noise from the summaries). Everything read is type-checked: a malformed file
is a :class:`~layerprof.errors.ProfileFormatError` naming the field.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from layerprof import sinks
from layerprof.analysis.diff import (
    BASES,
    STATUSES,
    Change,
    Diff,
    GateResult,
    KernelDelta,
    LayerDelta,
    OpDelta,
    StepDelta,
)
from layerprof.errors import ProfileFormatError
from layerprof.profile import Profile, Run
from layerprof.reading import read_json
from layerprof.records import LayerInfo, LayerSamples, Meta, OpSamples, OpStat, Overhead
from layerprof.sections import (
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
from layerprof.stats import Series, Summary
from layerprof.units import NS_PER_MS, NS_PER_US, ms, ms_list, ns_from_ms

PROFILE_SCHEMA = "layerprof.profile/2"
RUN_SCHEMA = "layerprof.trace/2"
DIFF_SCHEMA = "layerprof.diff/1"
LEGACY_PROFILE = "layerprof.profile/1"
LEGACY_RUN = "layerprof.trace/1"
SCHEMAS = (PROFILE_SCHEMA, RUN_SCHEMA, DIFF_SCHEMA, LEGACY_PROFILE, LEGACY_RUN)

_LAYER_SERIES = (
    ("total_ns", "total_ms"),
    ("self_ns", "self_ms"),
    ("device_total_ns", "device_total_ms"),
    ("device_self_ns", "device_self_ms"),
    ("backward_total_ns", "backward_total_ms"),
    ("backward_self_ns", "backward_self_ms"),
)
_OP_SERIES = (("self_ns", "self_ms"), ("total_ns", "total_ms"), ("device_ns", "device_ms"))

T = TypeVar("T")


# =============================================================================== writing


def to_dict(
    obj: Any,
    *,
    samples: bool = False,
    top: int | None = None,
    gate: GateResult | None = None,
    **_: Any,
) -> dict[str, Any]:
    """The JSON document of a Profile, a Run or a Diff (``gate``: a diff's gate result)."""
    if isinstance(obj, Profile):
        return {"schema": PROFILE_SCHEMA, **_profile_body(obj, samples=samples, top=top)}
    if isinstance(obj, Run):
        return run_to_dict(obj, samples=samples, top=top)
    if isinstance(obj, Diff):
        return diff_to_dict(obj, top=top, gate=gate)
    raise TypeError(f"cannot encode a {type(obj).__name__}")


def _profile_body(p: Profile, *, samples: bool, top: int | None = None) -> dict[str, Any]:
    meta = asdict(p.meta)
    meta["inputs"] = list(p.meta.inputs)
    out: dict[str, Any] = {
        "meta": meta,
        "latency_ms": _latency(p, samples=True),
        "overhead": _overhead(p.overhead),
        "layers": [_layer(p, r, samples) for r in p.rows()],
        "ops": [_op(o, samples) for o in _top(p.ops, top)],
        "notes": list(p.notes),
    }
    sections: dict[str, Any] = {
        "source": _source(p.source) if p.source is not None else None,
        "steps": _steps(p.steps) if p.steps is not None else None,
        "devices": [_device(d) for d in p.devices],
        "kernels": [_kernel(k) for k in _top(p.kernels, top)],
        "kernel_kinds": [asdict_ms(k) for k in p.kinds],
        "memcpy": [asdict_ms(m) for m in p.memcpy],
        "launch": _launches(p.launches, top),
        "memory": _memory(p.memory, top),
        "annotations": [asdict_ms(a) for a in p.annotations],
    }
    out.update({k: v for k, v in sections.items() if v})
    return out


def _top(rows: Sequence[T], top: int | None) -> Sequence[T]:
    return rows if top is None else rows[: max(top, 0)]


def summary_dict(s: Summary, factor: float = 1 / NS_PER_MS) -> dict[str, float | int]:
    return s.scaled(factor)


def _latency(p: Profile, *, samples: bool) -> dict[str, Any] | None:
    if p.latency_ns is None:
        return None
    out: dict[str, Any] = {**summary_dict(p.latency_ns.summary), "first": ms(p.first_ns)}
    if samples and p.latency_ns.values is not None:
        out["samples"] = ms_list(p.latency_ns.tolist())
    return out


def _overhead(o: Overhead | None) -> dict[str, Any] | None:
    if o is None:
        return None
    return {
        "per_call_us": o.per_call_ns / NS_PER_US,
        "inside_us": o.inside_ns / NS_PER_US,
        "corrected": o.corrected,
        "calls_per_forward": o.calls_per_forward,
        "clean_ms": ms(o.clean_ns),
        "instrumented_ms": ms(o.instrumented_ns),
        "ratio": (o.instrumented_ns / o.clean_ns) if o.clean_ns and o.instrumented_ns else None,
    }


def layer_record(row: Any) -> dict[str, Any]:
    """One derived layer row as a flat record (JSON layers, DataFrame rows)."""
    d: dict[str, Any] = {
        "path": row.path,
        "type": row.type,
        "parent": row.parent,
        "depth": row.depth,
        "calls": row.calls,
        "total_ms": row.total_ns / NS_PER_MS,
        "self_ms": row.self_ns / NS_PER_MS,
        "share": row.share,
        "params": row.params,
        "params_own": row.params_own,
        **({"calls_vary": True} if row.calls_vary else {}),
        **({"flops": row.flops} if row.flops is not None else {}),
        **({"output_bytes": row.output_bytes} if row.output_bytes is not None else {}),
        **({"peak_bytes": row.peak_bytes} if row.peak_bytes is not None else {}),
        "input_shapes": row.input_shapes,
        "output_shapes": row.output_shapes,
    }
    for key in ("device_total_ns", "device_self_ns", "backward_total_ns", "backward_self_ns"):
        value = getattr(row, key)
        if value is not None:
            d[key.replace("_ns", "_ms")] = value / NS_PER_MS
    return d


def layer_records(profile: Profile) -> list[dict[str, Any]]:
    return [layer_record(r) for r in profile.rows()]


def _layer(p: Profile, row: Any, samples: bool) -> dict[str, Any]:
    d = layer_record(row)
    s = p.samples.get(row.path)
    if s is not None:
        d["series"] = _series_dict(s, _LAYER_SERIES)
        if samples and s.total_ns.values is not None:
            d["samples"] = _samples_dict(s, _LAYER_SERIES)
    return d


def _series_dict(obj: Any, fields: Sequence[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr, key in fields:
        series = getattr(obj, attr)
        if series is not None:
            out[key] = summary_dict(series.summary)
    return out


def _samples_dict(obj: Any, fields: Sequence[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr, key in fields:
        series = getattr(obj, attr)
        if series is not None and series.values is not None:
            out[key] = ms_list(series.tolist())
    return out


def _op(o: OpStat, samples: bool) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": o.name,
        "calls": o.calls,
        "self_ms": o.self_ns / NS_PER_MS,
        "total_ms": o.total_ns / NS_PER_MS,
        **({"device_ms": o.device_ns / NS_PER_MS} if o.device_ns is not None else {}),
        "layer": o.layer,
        "input_shapes": o.input_shapes,
        **({"phase": o.phase} if o.phase != "forward" else {}),
    }
    if o.samples is not None:
        series = _series_dict(o.samples, _OP_SERIES)
        series["calls"] = summary_dict(o.samples.calls.summary, 1.0)
        d["series"] = series
        if samples and o.samples.self_ns.values is not None:
            kept = _samples_dict(o.samples, _OP_SERIES)
            kept["calls"] = o.samples.calls.tolist()
            d["samples"] = kept
    return d


def asdict_ms(obj: Any) -> dict[str, Any]:
    """A flat section row: ``*_ns`` fields become ``*_ms`` (µs for launch summaries)."""
    out: dict[str, Any] = {}
    for key, value in asdict(obj).items():
        if key.endswith("_ns") and isinstance(value, (int, float)):
            out[key[:-3] + "_ms"] = value / NS_PER_MS
        elif key.endswith("_ns") and value is None:
            out[key[:-3] + "_ms"] = None
        else:
            out[key] = value
    return out


def _source(s: TraceSource) -> dict[str, Any]:
    return {
        "file": s.file,
        "rank": s.rank,
        "events": s.events,
        "has_device_data": s.has_device,
        "device_names": list(s.device_names),
        "module_source": s.module_source,
        "layerprof": s.producer,
        "run": s.run,
        "window_ms": s.window_ns / NS_PER_MS,
    }


def _steps(s: Steps) -> dict[str, Any]:
    return {
        "source": s.source,
        "definition": s.definition,
        "thread": s.thread,
        "steps": [
            {"name": x.name, "start_ms": x.start_ns / NS_PER_MS, "ms": x.dur_ns / NS_PER_MS,
             "cut_off": x.cut_off}
            for x in s.steps
        ],
    }  # fmt: skip


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


def _read_device(f: _Fields) -> DeviceUse:
    idle = _required(f, "idle_breakdown_ms")
    return DeviceUse(
        device=f.integer("device"),
        busy_ns=f.ns("busy_ms"),
        busy_in_window_ns=f.ns("busy_in_window_ms"),
        window_ns=f.ns("window_ms"),
        idle_ns=f.ns("idle_ms"),
        utilization=f.number("utilization"),
        kernel_ns=f.ns("kernel_ms"),
        memcpy_ns=f.ns("memcpy_ms"),
        memset_ns=f.ns("memset_ms"),
        streams=f.integer("streams"),
        host_wait_ns=idle.ns("host_wait"),
        short_gap_ns=idle.ns("short_gap"),
        other_idle_ns=idle.ns("other"),
    )


def _kernel(k: KernelRow) -> dict[str, Any]:
    return {**asdict_ms(k), "mean_ms": k.mean_ns / NS_PER_MS}


def _summary_us(s: Summary | None) -> dict[str, float | int] | None:
    return None if s is None else s.scaled(1 / NS_PER_US)


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
        "runtime": [asdict_ms(r) for r in _top(launch.runtime, top)],
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


def run_to_dict(run: Run, *, samples: bool = False, top: int | None = None) -> dict[str, Any]:
    return {
        "schema": RUN_SCHEMA,
        "path": run.path,
        "rank_source": run.rank_source,
        "skipped": list(run.skipped),
        "notes": list(run.notes),
        "ranks": [
            {"rank": p.rank, **_profile_body(p, samples=samples, top=top)} for p in run.ranks
        ],
        "cross_rank": _cross(run.cross),
    }


def _cross(c: CrossRank | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "slowest_rank": c.slowest_rank,
        "ranks": [
            {
                "rank": line.rank,
                "median_step_ms": ms(line.median_step_ns),
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


# ---- diff ------------------------------------------------------------------------------


def diff_to_dict(
    d: Diff, *, top: int | None = None, gate: GateResult | None = None
) -> dict[str, Any]:
    """The ``layerprof.diff/1`` document; ``top`` keeps the largest changed rows.

    Added and removed rows are always all listed; ``summary`` counts every
    row whether shown or not.
    """
    layers = d.changed_layers(top) + d.added_layers() + d.removed_layers()
    ops = d.changed_ops(top) + d.added_ops() + d.removed_ops()
    kernels = d.changed_kernels(top) + [r for r in d.kernels if r.status in ("added", "removed")]
    counts = d.counts()
    gate = gate if gate is not None else d.gate_result
    return {
        "schema": DIFF_SCHEMA,
        "verdict": d.headline(),
        "base": {"model": d.base_meta.model, "meta": _meta_dict(d.base_meta)},
        "new": {"model": d.new_meta.model, "meta": _meta_dict(d.new_meta)},
        "settings": {
            "threshold_pct": d.threshold_pct,
            "alpha": d.alpha,
            "floor_ms": d.floor_ns / NS_PER_MS,
            "layer_clock": d.layer_clock,
            "layer_metric": "self",
            "op_metric": d.op_metric,
            "op_key": d.op_key,
            "rule": d.rule_text(),
        },
        "comparable": d.comparable,
        "reason": d.reason,
        "warnings": list(d.warnings),
        "latency": _change(d.latency) if d.latency else None,
        "steps": [{"index": s.index, **_change(s.change)} for s in d.steps],
        "layers": [_layer_delta(r) for r in layers],
        "ops": [_op_delta(r) for r in ops],
        "kernels": [{"name": r.name, **_change(r.change)} for r in kernels],
        "summary": {
            "verdict": d.verdict,
            "latency": d.latency.status if d.latency else None,
            "layers": counts["layers"],
            "ops": counts["ops"],
            "shown": {"layers": len(layers), "ops": len(ops)},
        },
        "gate": gate.to_dict() if gate is not None else None,
    }


def _meta_dict(meta: Meta) -> dict[str, Any]:
    d = asdict(meta)
    d["inputs"] = list(meta.inputs)
    return d


def _change(c: Change) -> dict[str, Any]:
    return {
        "base_ms": ms(c.base_ns),
        "new_ms": ms(c.new_ns),
        "delta_ms": c.delta_ns / NS_PER_MS,
        "delta_pct": c.delta_pct,
        "status": c.status,
        "significant": c.significant,
        "beyond_noise": c.beyond_noise,
        "basis": c.basis,
        "p_value": c.p_value,
        "noise_ms": ms(c.noise_ns),
        "ci_ms": ms(c.ci_ns),
    }


def _layer_delta(r: LayerDelta) -> dict[str, Any]:
    return {
        "path": r.path,
        "type": r.type,
        "base_type": r.base_type,
        "calls_base": r.calls_base,
        "calls_new": r.calls_new,
        "note": r.note,
        "metric": "self",
        **_change(r.change),
        "total": _change(r.total),
    }


def _op_delta(r: OpDelta) -> dict[str, Any]:
    return {
        "name": r.name,
        "input_shapes": r.input_shapes,
        "calls_base": r.calls_base,
        "calls_new": r.calls_new,
        **_change(r.change),
    }


# =============================================================================== reading


class _Fields:
    """Typed access to one JSON object, naming the field in every error."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            raise ProfileFormatError(f"{where} is not an object")
        self.data = data
        self.where = where

    def _fail(self, key: str, what: str) -> ProfileFormatError:
        return ProfileFormatError(f"{self.where}.{key}: {what}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def text(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise self._fail(key, f"expected a string, found {_kind(value)}")
        return value

    def opt_text(self, key: str) -> str | None:
        return None if self.data.get(key) is None else self.text(key)

    def number(self, key: str, default: float | None = None) -> float:
        value = self.data.get(key, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise self._fail(key, f"expected a finite number, found {_kind(value)}")
        return float(value)

    def opt_number(self, key: str) -> float | None:
        return None if self.data.get(key) is None else self.number(key)

    def integer(self, key: str, default: int | None = None) -> int:
        value = self.number(key, default)
        if value != int(value) or abs(value) > 2**62:
            raise self._fail(key, f"expected an integer, found {value!r}")
        return int(value)

    def opt_integer(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.integer(key)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(key, f"expected true or false, found {_kind(value)}")
        return value

    def ns(self, key: str) -> int:
        """A required ``*_ms`` number as integer ns."""
        value = ns_from_ms(self.number(key))
        assert value is not None
        return value

    def opt_ns(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.ns(key)

    def items(self, key: str, *, required: bool = False) -> list[Any]:
        value = self.data.get(key)
        if value is None and not required:
            return []
        if not isinstance(value, list):
            raise self._fail(key, f"expected a list, found {_kind(value)}")
        return value

    def obj(self, key: str) -> _Fields | None:
        value = self.data.get(key)
        return None if value is None else _Fields(value, f"{self.where}.{key}")

    def objects(self, key: str, *, required: bool = False) -> list[_Fields]:
        return [
            _Fields(item, f"{self.where}.{key}[{i}]")
            for i, item in enumerate(self.items(key, required=required))
        ]

    def shapes(self, key: str) -> Any:
        value = self.data.get(key)
        if not _json_tree(value):
            raise self._fail(key, "expected nested lists of shapes")
        return value


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "a boolean"
    return f"{type(value).__name__} {str(value)[:40]!r}"


def _json_tree(value: Any, depth: int = 0) -> bool:
    """Shapes as the hooks record them: ints, strings, None, lists and dicts of them."""
    if depth > 32:
        return False
    if value is None or (isinstance(value, (int, str)) and not isinstance(value, bool)):
        return True
    if isinstance(value, list):
        return all(_json_tree(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_tree(v, depth + 1) for k, v in value.items())
    return False


def from_dict(data: Any, *, source: str = "<dict>") -> Profile | Run | Diff:
    """Whatever layerprof document ``data`` is; ProfileFormatError for anything else."""
    if not isinstance(data, Mapping) or "schema" not in data:
        raise ProfileFormatError(
            f"{source}: not a layerprof profile, trace analysis or diff (no 'schema' key)",
            hint="make one with layerprof run --json, analyze --json or diff --json",
        )
    schema = data["schema"]
    readers: dict[str, Callable[[Any, str], Profile | Run | Diff]] = {
        PROFILE_SCHEMA: _read_profile,
        LEGACY_PROFILE: _read_profile,
        RUN_SCHEMA: _read_run,
        LEGACY_RUN: _read_legacy_run,
        DIFF_SCHEMA: _read_diff,
    }
    reader = readers.get(schema) if isinstance(schema, str) else None
    if reader is None:
        raise ProfileFormatError(
            f"{source}: unknown schema {str(schema)[:60]!r}",
            hint="known: " + ", ".join(SCHEMAS) + "; re-create the file with this layerprof",
        )
    try:
        return reader(data, source)
    except ProfileFormatError as exc:
        if str(exc).startswith(source):
            raise
        raise ProfileFormatError(f"{source}: {exc}", hint=exc.hint) from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ProfileFormatError(f"{source}: malformed {schema} document ({exc})") from exc


def profile_from_dict(data: Any, *, source: str = "<dict>") -> Profile:
    loaded = from_dict(data, source=source)
    if not isinstance(loaded, Profile):
        raise ProfileFormatError(f"{source}: a {data.get('schema')} file, not a profile")
    return loaded


def run_from_dict(data: Any, *, source: str = "<dict>") -> Run:
    loaded = from_dict(data, source=source)
    if not isinstance(loaded, Run):
        raise ProfileFormatError(f"{source}: a {data.get('schema')} file, not a trace analysis")
    return loaded


def diff_from_dict(data: Any, *, source: str = "<dict>") -> Diff:
    loaded = from_dict(data, source=source)
    if not isinstance(loaded, Diff):
        raise ProfileFormatError(f"{source}: a {data.get('schema')} file, not a diff")
    return loaded


def load(
    path: str | os.PathLike[str], *, max_input_size: int | None = None
) -> Profile | Run | Diff:
    """Read a saved profile, trace analysis or diff (bounded read, type-checked)."""
    p = Path(path)
    data = read_json(p, max_input_size=max_input_size, error=ProfileFormatError)
    return from_dict(data, source=str(p))


# ---- profile ----------------------------------------------------------------------------


def _read_meta(f: _Fields) -> Meta:
    known = set(Meta.__dataclass_fields__)
    strings = ("model", "device", "dtype", "torch", "mode", "source", "created", "host")
    values: dict[str, Any] = {k: f.text(k) for k in strings if k in f.data}
    if "model" not in values:
        values["model"] = ""
    if f.has("note"):
        values["note"] = f.text("note")
    for key in ("warmup", "iters"):
        if f.has(key):
            values[key] = f.integer(key)
    if f.has("threads"):
        values["threads"] = f.integer("threads")
    values["grad"] = f.flag("grad")
    inputs = f.items("inputs")
    if not all(isinstance(i, str) for i in inputs):
        raise ProfileFormatError(f"{f.where}.inputs: expected a list of strings")
    values["inputs"] = tuple(inputs)
    extra = f.data.get("extra")
    extra = dict(extra) if isinstance(extra, Mapping) else {}
    extra.update({k: v for k, v in f.data.items() if k not in known})
    return Meta(**values, extra=extra)


def _read_summary(f: _Fields, factor: float = NS_PER_MS) -> Summary:
    """A summary written in ms (or µs), back in ns; rounded to 1e-3 ns so that the
    float round trip (ns -> ms -> ns) gives back the numbers that were written."""

    def value(key: str) -> float:
        return round(f.number(key) * factor, 3)

    def opt(key: str) -> float | None:
        return None if f.opt_number(key) is None else value(key)

    return Summary(
        median=value("median"),
        mean=value("mean"),
        p90=value("p90"),
        p99=value("p99"),
        min=value("min"),
        max=value("max"),
        std=value("std"),
        n=f.integer("n"),
        mad=opt("mad"),
        ci_low=opt("ci_low"),
        ci_high=opt("ci_high"),
    )


def _read_series(
    samples: _Fields | None, series: _Fields | None, key: str, factor: float = NS_PER_MS
) -> Series | None:
    """A Series from kept samples (preferred) or from its summary; None when neither is there."""
    if samples is not None and samples.has(key):
        values = samples.items(key)
        if not values or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v * factor) < 2.0**62
            for v in values
        ):
            raise ProfileFormatError(f"{samples.where}.{key}: expected a list of numbers")
        return Series([v * factor for v in values])
    summary = series.obj(key) if series is not None else None
    return Series(summary=_read_summary(summary, factor)) if summary is not None else None


def _read_profile(data: Any, source: str) -> Profile:
    f = _Fields(data, "profile")
    legacy = data.get("schema") == LEGACY_PROFILE
    meta_f = f.obj("meta")
    if meta_f is None:
        raise ProfileFormatError("profile.meta: missing")
    layers: list[LayerInfo] = []
    samples: dict[str, LayerSamples] = {}
    for lf in f.objects("layers", required=True):
        info, smp = _read_layer(lf, legacy)
        layers.append(info)
        if smp is not None:
            samples[info.path] = smp
    latency, first = _read_latency(f.obj("latency_ms"))
    return Profile(
        meta=_read_meta(meta_f),
        layers=tuple(layers),
        samples=samples,
        latency_ns=latency,
        first_ns=first,
        overhead=_read_overhead(f.obj("overhead")),
        ops=tuple(_read_op(o) for o in f.objects("ops")),
        notes=tuple(_strings(f, "notes")),
        **_read_sections(f),
    )


def _strings(f: _Fields, key: str) -> list[str]:
    values = f.items(key)
    if not all(isinstance(v, str) for v in values):
        raise ProfileFormatError(f"{f.where}.{key}: expected a list of strings")
    return values


def _read_layer(lf: _Fields, legacy: bool) -> tuple[LayerInfo, LayerSamples | None]:
    path = lf.text("path")
    parent = lf.opt_text("parent")
    info = LayerInfo(
        path=path,
        type=lf.text("type"),
        parent=parent,
        params=lf.integer("params", 0),
        params_own=lf.integer("params_own", 0),
        input_shapes=lf.shapes("input_shapes"),
        output_shapes=lf.shapes("output_shapes"),
        flops=lf.opt_integer("flops"),
        output_bytes=lf.opt_integer("output_bytes"),
        peak_bytes=lf.opt_integer("peak_bytes"),
    )
    calls = lf.number("calls", 0)
    kept = lf.obj("samples")
    series = lf.obj("series")
    if legacy and series is None and lf.has("total_spread_ms") and kept is None:
        series = None  # profile/1 kept samples whenever it had any
    values = {attr: _read_series(kept, series, key) for attr, key in _LAYER_SERIES}
    total, self_ = values["total_ns"], values["self_ns"]
    if total is None or self_ is None:
        if not calls:
            return info, None
        # an old file with only the row's numbers: one sample of each
        total = Series([lf.ns("total_ms")])
        self_ = Series([lf.ns("self_ms")])
    return info, LayerSamples(
        total_ns=total,
        self_ns=self_,
        calls=calls,
        calls_vary=lf.flag("calls_vary"),
        device_total_ns=values["device_total_ns"],
        device_self_ns=values["device_self_ns"],
        backward_total_ns=values["backward_total_ns"],
        backward_self_ns=values["backward_self_ns"],
    )


def _read_latency(f: _Fields | None) -> tuple[Series | None, int | None]:
    if f is None:
        return None, None
    first = f.opt_ns("first")
    if f.has("samples"):
        values = f.items("samples")
        if values:
            series = _read_series(f, None, "samples")
            return series, first
    if f.has("median") and f.has("n"):
        return Series(summary=_read_summary(f)), first
    return None, first


def _read_overhead(f: _Fields | None) -> Overhead | None:
    if f is None:
        return None
    return Overhead(
        per_call_ns=f.number("per_call_us") * NS_PER_US,
        inside_ns=f.number("inside_us", 0) * NS_PER_US,
        corrected=f.flag("corrected"),
        calls_per_forward=f.number("calls_per_forward", 0),
        clean_ns=f.opt_ns("clean_ms"),
        instrumented_ns=f.opt_ns("instrumented_ms"),
    )


def _read_op(f: _Fields) -> OpStat:
    phase = f.text("phase", "forward")
    if phase not in ("forward", "backward"):
        raise ProfileFormatError(f"{f.where}.phase: expected forward or backward, found {phase!r}")
    kept, series = f.obj("samples"), f.obj("series")
    op_samples = None
    if series is not None or kept is not None:
        self_s = _read_series(kept, series, "self_ms")
        total_s = _read_series(kept, series, "total_ms")
        calls_s = _read_series(kept, series, "calls", 1.0)
        if self_s is not None and total_s is not None and calls_s is not None:
            op_samples = OpSamples(
                calls=calls_s,
                self_ns=self_s,
                total_ns=total_s,
                device_ns=_read_series(kept, series, "device_ms"),
            )
    device = f.opt_number("device_ms")
    return OpStat(
        name=f.text("name"),
        calls=f.number("calls"),
        self_ns=f.number("self_ms") * NS_PER_MS,
        total_ns=f.number("total_ms") * NS_PER_MS,
        device_ns=device * NS_PER_MS if device is not None else None,
        layer=f.opt_text("layer"),
        input_shapes=f.opt_text("input_shapes"),
        phase=phase,
        samples=op_samples,
    )


def _read_sections(f: _Fields) -> dict[str, Any]:
    out: dict[str, Any] = {}
    src = f.obj("source")
    if src is not None:
        out["source"] = _read_source(src)
    steps = f.obj("steps")
    if steps is not None:
        out["steps"] = _read_steps(steps)
    out["devices"] = tuple(_read_device(d) for d in f.objects("devices"))
    out["kernels"] = tuple(_read_row(KernelRow, k) for k in f.objects("kernels"))
    out["kinds"] = tuple(_read_row(KindRow, k) for k in f.objects("kernel_kinds"))
    out["memcpy"] = tuple(_read_row(MemcpyRow, m) for m in f.objects("memcpy"))
    out["launches"] = _read_launches(f.obj("launch"))
    out["memory"] = _read_memory(f.obj("memory"))
    out["annotations"] = tuple(_read_row(AnnotationRow, a) for a in f.objects("annotations"))
    return out


def _read_row(cls: type[T], f: _Fields) -> T:
    """A flat section row written by :func:`asdict_ms`: ``*_ms`` back to ``*_ns``."""
    values: dict[str, Any] = {}
    for name, fld in cls.__dataclass_fields__.items():  # type: ignore[attr-defined]
        typ = str(fld.type)
        key = name[:-3] + "_ms" if name.endswith("_ns") else name
        optional = "None" in typ
        if name.endswith("_ns"):
            values[name] = f.opt_ns(key) if optional else f.ns(key)
        elif typ.startswith("int"):
            values[name] = f.opt_integer(key) if optional else f.integer(key)
        elif typ.startswith("float"):
            values[name] = f.opt_number(key) if optional else f.number(key)
        elif typ.startswith("str"):
            values[name] = f.opt_text(key) if optional else f.text(key)
        else:  # pragma: no cover - every section row is flat
            values[name] = f.data.get(key)
    return cls(**values)


def _read_source(f: _Fields) -> TraceSource:
    producer = f.data.get("layerprof")
    run = f.data.get("run")
    return TraceSource(
        file=f.text("file"),
        rank=f.integer("rank"),
        events=f.integer("events", 0),
        has_device=f.flag("has_device_data"),
        window_ns=f.ns("window_ms") if f.has("window_ms") else 0,
        device_names=tuple(_strings(f, "device_names")),
        module_source=f.opt_text("module_source"),
        producer=dict(producer) if isinstance(producer, Mapping) else None,
        run=dict(run) if isinstance(run, Mapping) else {},
    )


def _read_steps(f: _Fields) -> Steps:
    steps = tuple(
        Step(
            name=s.text("name"),
            start_ns=s.ns("start_ms") if s.has("start_ms") else 0,
            dur_ns=s.ns("ms"),
            cut_off=s.flag("cut_off"),
        )
        for s in f.objects("steps")
    )
    return Steps(steps=steps, source=f.text("source"), thread=f.opt_integer("thread"))


def _read_launches(f: _Fields | None) -> Launches | None:
    if f is None:
        return None
    call, delay = f.obj("call_us"), f.obj("delay_us")
    return Launches(
        launches=f.integer("launches"),
        call_ns=_read_summary(call, NS_PER_US) if call is not None else None,
        call_total_ns=f.ns("call_total_ms"),
        delay_ns=_read_summary(delay, NS_PER_US) if delay is not None else None,
        negative_delays=f.integer("negative_delays", 0),
        unmatched_device_ops=f.integer("unmatched_device_ops", 0),
        sync_ns=f.ns("sync_ms") if f.has("sync_ms") else 0,
        runtime=tuple(_read_row(RuntimeRow, r) for r in f.objects("runtime")),
    )


def _read_memory(f: _Fields | None) -> MemorySummary | None:
    if f is None:
        return None
    return MemorySummary(
        devices=tuple(
            DeviceMemory(
                device=d.text("device"),
                peak_allocated=d.integer("peak_allocated_bytes"),
                allocations=d.integer("allocations"),
                allocated_bytes=d.integer("allocated_bytes"),
                freed_bytes=d.integer("freed_bytes"),
            )
            for d in f.objects("devices")
        ),
        top_ops=tuple(
            AllocRow(
                op=r.text("op"), allocations=r.integer("allocations"), bytes=r.integer("bytes")
            )
            for r in f.objects("top_ops")
        ),
    )


# ---- run ------------------------------------------------------------------------------


def _read_run(data: Any, source: str) -> Run:
    f = _Fields(data, "run")
    ranks = tuple(
        _read_profile({**r.data, "schema": PROFILE_SCHEMA}, source)
        for r in f.objects("ranks", required=True)
    )
    return Run(
        path=f.text("path", source),
        ranks=ranks,
        rank_source=f.text("rank_source", "file order"),
        cross=_read_cross(f.obj("cross_rank")),
        skipped=tuple(_strings(f, "skipped")),
        notes=tuple(_strings(f, "notes")),
    )


def _read_cross(f: _Fields | None) -> CrossRank | None:
    if f is None:
        return None
    steps = []
    for s in f.objects("steps"):
        by_rank = s.obj("ms_by_rank")
        pairs: list[tuple[int, int]] = []
        if by_rank is not None:
            for key in by_rank.data:
                if not str(key).lstrip("-").isdigit():
                    raise ProfileFormatError(f"{by_rank.where}: rank {key!r} is not a number")
                pairs.append((int(key), by_rank.ns(key)))
        steps.append(
            StepAcrossRanks(
                name=s.text("name"),
                ns_by_rank=tuple(sorted(pairs)),
                slowest_rank=s.integer("slowest_rank"),
                spread_ns=s.ns("spread_ms"),
            )
        )
    lines = tuple(
        RankLine(
            rank=r.integer("rank"),
            median_step_ns=r.opt_ns("median_step_ms"),
            communication_ns=r.ns("communication_ms"),
            compute_ns=r.ns("compute_ms"),
        )
        for r in f.objects("ranks")
    )
    return CrossRank(steps=tuple(steps), ranks=lines, slowest_rank=f.opt_integer("slowest_rank"))


def _read_legacy_run(data: Any, source: str) -> Run:
    """A ``layerprof.trace/1`` document (layerprof 0.1.0): summaries per rank."""
    f = _Fields(data, "trace")
    ranks = tuple(_legacy_rank(r, source) for r in f.objects("ranks", required=True))
    return Run(
        path=f.text("path", source),
        ranks=ranks,
        rank_source=f.text("rank_source", "file order"),
        cross=_read_cross(f.obj("cross_rank")),
        skipped=tuple(_strings(f, "skipped")),
        notes=(f"{source}: a layerprof.trace/1 file; per-step layer and operator times"
               " are the trace's totals divided by its steps",),
    )  # fmt: skip


def _legacy_rank(f: _Fields, source: str) -> Profile:
    has_device = f.flag("has_device_data")
    steps = Steps(
        steps=tuple(
            Step(s.text("name"), 0, s.ns("ms"), s.flag("cut_off")) for s in f.objects("steps")
        ),
        source=f.text("step_source", "trace"),
        thread=None,
    )
    done = [s.dur_ns for s in steps.complete]
    n = max(len(done), 1)
    producer = f.data.get("layerprof")
    source_info = TraceSource(
        file=f.text("file", source),
        rank=f.integer("rank", 0),
        events=f.integer("events", 0),
        has_device=has_device,
        window_ns=f.ns("window_ms") if f.has("window_ms") else 0,
        device_names=tuple(_strings(f, "device_names")),
        module_source=f.opt_text("module_source"),
        producer=dict(producer) if isinstance(producer, Mapping) else None,
    )
    rows = f.objects("modules") or f.objects("annotations")
    layers, samples = [], {}
    for r in rows:
        path = r.text("path")
        layers.append(
            LayerInfo(path=path, type=r.text("type", "layer"), parent=r.opt_text("parent"))
        )
        per_step = r.items("step_total_ms")
        total = (
            [ns_from_ms(v) for v in per_step]
            if len(per_step) == len(done) and per_step
            else [r.ns("total_ms") // n]
        )
        self_ = [r.ns("self_ms") // n] * len(total)
        samples[path] = LayerSamples(total_ns=total, self_ns=self_, calls=r.number("calls", 0) / n)
    ops = tuple(
        OpStat(
            name=o.text("name"),
            calls=o.number("calls") / n,
            self_ns=o.number("self_ms") * NS_PER_MS / n,
            total_ns=o.number("total_ms") * NS_PER_MS / n,
            device_ns=o.number("device_ms") * NS_PER_MS / n if o.has("device_ms") else None,
            input_shapes=o.opt_text("input_shapes"),
        )
        for o in f.objects("ops")
    )
    model = (producer or {}).get("model") if isinstance(producer, Mapping) else None
    meta = Meta(
        model=model if isinstance(model, str) and model else source_info.file,
        device="cuda" if has_device else "",
        dtype="",
        iters=len(done),
        source="trace",
        extra={"rank": source_info.rank, "file": source_info.file},
    )
    return Profile(
        meta=meta,
        layers=tuple(layers),
        samples=samples,
        latency_ns=Series(done) if done else None,
        ops=ops,
        notes=tuple(_strings(f, "notes")),
        source=source_info,
        steps=steps,
        devices=tuple(_read_device(d) for d in f.objects("devices")),
        kernels=tuple(_read_row(KernelRow, k) for k in f.objects("kernels")),
        kinds=tuple(_read_row(KindRow, k) for k in f.objects("kernel_kinds")),
        memcpy=tuple(_read_row(MemcpyRow, m) for m in f.objects("memcpy")),
        launches=_read_launches(f.obj("launch")),
        memory=_read_memory(f.obj("memory")),
    )


# ---- diff ------------------------------------------------------------------------------


def _read_change(f: _Fields) -> Change:
    status, basis = f.text("status"), f.text("basis")
    if status not in STATUSES or basis not in BASES:
        raise ProfileFormatError(f"{f.where}: unknown status {status!r} or basis {basis!r}")
    return Change(
        base_ns=f.opt_ns("base_ms"),
        new_ns=f.opt_ns("new_ms"),
        delta_ns=f.ns("delta_ms"),
        delta_pct=f.opt_number("delta_pct"),
        beyond_noise=f.flag("beyond_noise"),
        significant=f.flag("significant"),
        status=status,  # type: ignore[arg-type]
        basis=basis,  # type: ignore[arg-type]
        p_value=f.opt_number("p_value"),
        noise_ns=f.opt_ns("noise_ms"),
        ci_ns=f.opt_ns("ci_ms"),
    )


def _read_diff(data: Any, source: str) -> Diff:
    f = _Fields(data, "diff")
    settings = f.obj("settings")
    base, new = f.obj("base"), f.obj("new")
    if settings is None or base is None or new is None:
        raise ProfileFormatError("diff: missing settings, base or new")
    base_meta, new_meta = base.obj("meta"), new.obj("meta")
    if base_meta is None or new_meta is None:
        raise ProfileFormatError("diff: missing base.meta or new.meta")
    lat = f.obj("latency")
    layer_clock = settings.text("layer_clock")
    op_metric = settings.text("op_metric")
    op_key = settings.text("op_key")
    if (
        layer_clock not in ("host", "device")
        or op_metric not in ("self", "device")
        or op_key
        not in (
            "name",
            "name+shapes",
        )
    ):
        raise ProfileFormatError(f"{settings.where}: unknown clock, metric or key")
    return Diff(
        base_meta=_read_meta(base_meta),
        new_meta=_read_meta(new_meta),
        latency=_read_change(lat) if lat is not None else None,
        steps=tuple(
            StepDelta(index=s.integer("index"), change=_read_change(s)) for s in f.objects("steps")
        ),
        layers=tuple(
            LayerDelta(
                path=d.text("path"),
                type=d.text("type"),
                base_type=d.opt_text("base_type"),
                calls_base=d.opt_number("calls_base"),
                calls_new=d.opt_number("calls_new"),
                note=d.opt_text("note"),
                change=_read_change(d),
                total=_read_change(_required(d, "total")),
            )
            for d in f.objects("layers", required=True)
        ),
        ops=tuple(
            OpDelta(
                name=d.text("name"),
                input_shapes=d.opt_text("input_shapes"),
                calls_base=d.opt_number("calls_base"),
                calls_new=d.opt_number("calls_new"),
                change=_read_change(d),
            )
            for d in f.objects("ops", required=True)
        ),
        kernels=tuple(
            KernelDelta(name=d.text("name"), change=_read_change(d)) for d in f.objects("kernels")
        ),
        warnings=tuple(_strings(f, "warnings")),
        comparable=f.flag("comparable", True),
        reason=f.opt_text("reason"),
        threshold_pct=settings.number("threshold_pct"),
        floor_ns=settings.ns("floor_ms"),
        alpha=settings.number("alpha"),
        layer_clock=layer_clock,  # type: ignore[arg-type]
        op_metric=op_metric,  # type: ignore[arg-type]
        op_key=op_key,  # type: ignore[arg-type]
        gate_result=_read_gate(f.obj("gate")),
    )


def _required(f: _Fields, key: str) -> _Fields:
    found = f.obj(key)
    if found is None:
        raise ProfileFormatError(f"{f.where}.{key}: missing")
    return found


def _read_gate(f: _Fields | None) -> GateResult | None:
    if f is None:
        return None
    metric = f.text("metric")
    if metric not in ("any", "latency", "layers", "ops"):
        raise ProfileFormatError(f"{f.where}.metric: unknown {metric!r}")
    return GateResult(
        failed=f.flag("failed"),
        reasons=tuple(_strings(f, "reasons")),
        fail_above_pct=f.number("fail_above_pct", 0),
        metric=metric,  # type: ignore[arg-type]
    )


class _Codec:
    """The codec's functions under the interface ``layerprof.sinks`` expects."""

    to_dict = staticmethod(to_dict)
    from_dict = staticmethod(from_dict)
    load = staticmethod(load)
    layer_records = staticmethod(layer_records)


def _register() -> None:
    sinks.set_codec(_Codec())


_register()
