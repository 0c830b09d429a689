"""The pivot: a Profile holds meta, latency samples and per-layer samples.

Rows, trees and statistics are derived on demand from the per-iteration
samples, so a loaded profile supports everything a fresh one does.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from layerprof.errors import ProfileFormatError
from layerprof.files import write_atomic
from layerprof.records import LayerInfo, LayerSamples, Meta, OpStat, Overhead
from layerprof.stats import Summary, median

if TYPE_CHECKING:
    import pandas

SCHEMA = "layerprof.profile/1"
NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class LayerRow:
    """Derived per-layer statistics (times per forward, ns).

    ``self_ns`` is the median over iterations of the layer's self time (the
    mean when the layer's number of calls varies between iterations);
    ``total_ns`` is ``self_ns`` plus the children's ``total_ns`` (see
    ``_subtree_totals``); ``total`` summarizes the measured totals.
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

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1] if self.path else self.type


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
    list parents first)."""
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


def depth_of(path: str) -> int:
    return 0 if path == "" else path.count(".") + 1


@dataclass
class Profile:
    """Everything one profiling run (or one analyzed trace) produced."""

    meta: Meta
    layers: tuple[LayerInfo, ...] = ()
    samples: dict[str, LayerSamples] = field(default_factory=dict)
    latency_ns: tuple[int, ...] = ()
    first_ns: int | None = None
    overhead: Overhead | None = None
    ops: tuple[OpStat, ...] = ()
    notes: tuple[str, ...] = ()

    # ---- derived --------------------------------------------------------
    @property
    def latency(self) -> Summary | None:
        return Summary.of(self.latency_ns) if self.latency_ns else None

    def rows(self) -> list[LayerRow]:
        """One row per layer, in module order."""
        out: list[LayerRow] = []
        for info in self.layers:
            s = self.samples.get(info.path)
            total = Summary.of(s.total_ns) if s and s.total_ns else None
            self_s = Summary.of(s.self_ns) if s and s.self_ns else None
            # A layer called in only some iterations has a mixture of zeros and
            # real times: its per-forward cost is the mean, not the median.
            mid = _mean if s is not None and s.calls_vary else _med
            out.append(
                LayerRow(
                    path=info.path,
                    type=info.type,
                    parent=info.parent,
                    depth=depth_of(info.path),
                    calls=s.calls if s else 0.0,
                    total_ns=0.0,  # set bottom-up by _subtree_totals
                    self_ns=(mid(s.self_ns) or 0.0) if s else 0.0,
                    total=total,
                    self_summary=self_s,
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
                )
            )
        return _subtree_totals(out)

    def tree(self) -> list[LayerNode]:
        """The module tree (roots first), built from the rows' parent paths."""
        nodes = {row.path: LayerNode(row) for row in self.rows()}
        roots: list[LayerNode] = []
        for node in nodes.values():
            parent = node.row.parent
            if parent is not None and parent in nodes:
                nodes[parent].children.append(node)
            else:
                roots.append(node)
        return roots

    def row(self, path: str) -> LayerRow:
        for r in self.rows():
            if r.path == path:
                return r
        raise KeyError(path)

    # ---- sinks ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return profile_to_dict(self)

    def save(self, path: str | os.PathLike[str]) -> Path:
        return write_atomic(path, orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Profile:
        return load_profile(path)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<dict>") -> Profile:
        return profile_from_dict(data, source=source)

    def print(self, **options: Any) -> None:
        from layerprof.render.console import print_profile

        print_profile(self, **options)

    def to_dataframe(self) -> pandas.DataFrame:
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            from layerprof.errors import UsageError

            raise UsageError(
                "to_dataframe() needs pandas", hint="pip install 'layerprof[pandas]'"
            ) from exc
        return pd.DataFrame([layer_to_dict(r) for r in self.rows()])

    def with_notes(self, *notes: str) -> Profile:
        return replace(self, notes=(*self.notes, *notes))


def _med(values: Sequence[int] | None) -> float | None:
    return median(values) if values else None


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _mean(values: Sequence[int] | None) -> float | None:
    return sum(values) / len(values) if values else None


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def _ms_list(values: Sequence[int] | None) -> list[float] | None:
    return None if values is None else [v / NS_PER_MS for v in values]


def layer_to_dict(row: LayerRow) -> dict[str, Any]:
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
    if row.total is not None:
        d["total_spread_ms"] = {
            k: v for k, v in row.total.scaled(1 / NS_PER_MS).items() if k != "n"
        }
    for key in ("device_total_ns", "device_self_ns", "backward_total_ns", "backward_self_ns"):
        value = getattr(row, key)
        if value is not None:
            d[key.replace("_ns", "_ms")] = value / NS_PER_MS
    return d


def profile_to_dict(p: Profile) -> dict[str, Any]:
    meta = asdict(p.meta)
    meta["inputs"] = list(p.meta.inputs)
    layers = []
    for row in p.rows():
        d = layer_to_dict(row)
        s = p.samples.get(row.path)
        if s is not None:
            samples: dict[str, Any] = {
                "total_ms": _ms_list(s.total_ns),
                "self_ms": _ms_list(s.self_ns),
            }
            for key in (
                "device_total_ns",
                "device_self_ns",
                "backward_total_ns",
                "backward_self_ns",
            ):
                values = getattr(s, key)
                if values is not None:
                    samples[key.replace("_ns", "_ms")] = _ms_list(values)
            d["samples"] = samples
        layers.append(d)
    lat = p.latency
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "meta": meta,
        "latency_ms": None,
        "overhead": None,
        "layers": layers,
        "ops": [
            {
                "name": o.name,
                "calls": o.calls,
                "self_ms": o.self_ns / NS_PER_MS,
                "total_ms": o.total_ns / NS_PER_MS,
                **({"device_ms": o.device_ns / NS_PER_MS} if o.device_ns is not None else {}),
                "layer": o.layer,
                "input_shapes": o.input_shapes,
                **({"phase": o.phase} if o.phase != "forward" else {}),
            }
            for o in p.ops
        ],
        "notes": list(p.notes),
    }
    if lat is not None:
        out["latency_ms"] = {
            **lat.scaled(1 / NS_PER_MS),
            "first": _ms(p.first_ns),
            "samples": _ms_list(p.latency_ns),
        }
    if p.overhead is not None:
        o = p.overhead
        out["overhead"] = {
            "per_call_us": o.per_call_ns / 1000,
            "inside_us": o.inside_ns / 1000,
            "corrected": o.corrected,
            "calls_per_forward": o.calls_per_forward,
            "clean_ms": _ms(o.clean_ns),
            "instrumented_ms": _ms(o.instrumented_ns),
            "ratio": (o.instrumented_ns / o.clean_ns) if o.clean_ns and o.instrumented_ns else None,
        }
    return out


def _ns_tuple(values: Any) -> tuple[int, ...] | None:
    if values is None:
        return None
    return tuple(round(float(v) * NS_PER_MS) for v in values)


def profile_from_dict(data: Any, *, source: str) -> Profile:
    if not isinstance(data, dict) or "schema" not in data:
        raise ProfileFormatError(f"{source}: not a layerprof profile (no 'schema' key)")
    schema = data["schema"]
    if schema != SCHEMA:
        raise ProfileFormatError(
            f"{source}: schema {schema!r} is not {SCHEMA!r}",
            hint="re-create the profile with this version of layerprof",
        )
    try:
        _check_types(data)
        meta_d = dict(data["meta"])
        meta_d["inputs"] = tuple(meta_d.get("inputs") or ())
        known = set(Meta.__dataclass_fields__)
        extra = {k: v for k, v in meta_d.items() if k not in known}
        meta = Meta(**{k: v for k, v in meta_d.items() if k in known})
        if extra:
            meta = replace(meta, extra={**meta.extra, **extra})
        layers: list[LayerInfo] = []
        samples: dict[str, LayerSamples] = {}
        for d in data["layers"]:
            layers.append(
                LayerInfo(
                    path=d["path"],
                    type=d["type"],
                    parent=d.get("parent"),
                    params=int(d.get("params") or 0),
                    params_own=int(d.get("params_own") or 0),
                    input_shapes=d.get("input_shapes"),
                    output_shapes=d.get("output_shapes"),
                    flops=_opt_int(d.get("flops")),
                    output_bytes=_opt_int(d.get("output_bytes")),
                    peak_bytes=_opt_int(d.get("peak_bytes")),
                )
            )
            smp = d.get("samples")
            if smp:
                samples[d["path"]] = LayerSamples(
                    total_ns=_ns_tuple(smp["total_ms"]) or (),
                    self_ns=_ns_tuple(smp["self_ms"]) or (),
                    calls=float(d.get("calls", 0)),
                    calls_vary=bool(d.get("calls_vary", False)),
                    device_total_ns=_ns_tuple(smp.get("device_total_ms")),
                    device_self_ns=_ns_tuple(smp.get("device_self_ms")),
                    backward_total_ns=_ns_tuple(smp.get("backward_total_ms")),
                    backward_self_ns=_ns_tuple(smp.get("backward_self_ms")),
                )
            elif d.get("calls"):
                samples[d["path"]] = LayerSamples(
                    total_ns=(round(d["total_ms"] * NS_PER_MS),),
                    self_ns=(round(d["self_ms"] * NS_PER_MS),),
                    calls=float(d["calls"]),
                )
        lat = data.get("latency_ms") or {}
        latency = _ns_tuple(lat.get("samples")) or ()
        first = lat.get("first")
        ov = data.get("overhead")
        overhead = None
        if ov:
            overhead = Overhead(
                per_call_ns=float(ov["per_call_us"]) * 1000,
                inside_ns=float(ov.get("inside_us") or 0) * 1000,
                corrected=bool(ov.get("corrected")),
                calls_per_forward=float(ov.get("calls_per_forward") or 0),
                clean_ns=ov["clean_ms"] * NS_PER_MS if ov.get("clean_ms") is not None else None,
                instrumented_ns=ov["instrumented_ms"] * NS_PER_MS
                if ov.get("instrumented_ms") is not None
                else None,
            )
        ops = tuple(
            OpStat(
                name=o["name"],
                calls=int(o["calls"]),
                self_ns=round(o["self_ms"] * NS_PER_MS),
                total_ns=round(o["total_ms"] * NS_PER_MS),
                device_ns=round(o["device_ms"] * NS_PER_MS) if "device_ms" in o else None,
                layer=o.get("layer"),
                input_shapes=o.get("input_shapes"),
                phase=o.get("phase", "forward"),
            )
            for o in data.get("ops") or ()
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProfileFormatError(f"{source}: malformed profile ({exc!r})") from exc
    return Profile(
        meta=meta,
        layers=tuple(layers),
        samples=samples,
        latency_ns=latency,
        first_ns=round(first * NS_PER_MS) if first is not None else None,
        overhead=overhead,
        ops=ops,
        notes=tuple(data.get("notes") or ()),
    )


_META_STRINGS = ("model", "device", "dtype", "torch", "mode", "source")


def _check_types(data: dict[str, Any]) -> None:
    """Shape checks a loaded file must pass before anything trusts its fields."""
    meta = data.get("meta")
    if not isinstance(meta, dict):
        raise TypeError("'meta' is not an object")
    for key in _META_STRINGS:
        if key in meta and not isinstance(meta[key], str):
            raise TypeError(f"meta.{key} is not a string")
    if not isinstance(data.get("layers"), list):
        raise TypeError("'layers' is not a list")
    for key in ("latency_ms", "overhead"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise TypeError(f"'{key}' is not an object")
    if not isinstance(data.get("ops") or [], list):
        raise TypeError("'ops' is not a list")


def load_profile(path: str | os.PathLike[str], *, max_input_size: int | None = None) -> Profile:
    """A saved profile (``run --json``), read within the input size ceiling."""
    from layerprof.sources import read_json

    p = Path(path)
    return profile_from_dict(read_json(p, max_input_size=max_input_size), source=str(p))


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
