"""Operators and backward time per layer, per step: one engine for ops mode and traces.

* A forward op belongs to the innermost layerprof layer span (``layer:{path}``)
  around it on its thread, i.e. to the exact module path; ops outside every
  layer span are ``(unattributed)``.
* Backward: an ``autograd::engine::evaluate_function: XBackward0`` span carries
  the sequence number of the forward op that created its node; the node and
  every op under it belong to that forward op's layer, phase ``backward``.
  Ops that create no node record the number too (it is the next node's), so
  the creator is the last op on its thread to start with it. Sequence numbers
  count per thread: a number whose creators on two threads lie in two layers
  is ambiguous and left unattributed. Nodes with no forward op
  (``AccumulateGrad``, the loss) are ``(unattributed)`` too, never dropped.
* Per step (``steps.complete``; the whole trace when there are none): calls,
  self, total and (inclusive) device time per (layer, op name[, input shapes],
  phase) become ``OpStat`` rows with per-step samples; each layer's backward
  self time is the time of the top backward nodes attributed to it, and its
  backward total adds its sub-layers' (by module path).
* At most ``MAX_OP_ROWS`` rows, those with the most self time over all steps;
  the others are summed, per step, into one ``OTHER_OPS`` row per layer and
  phase, so every layer's operators still add up to the same times (a trace
  of 200k distinct names made 200k rows: 46 s and 1.5 GB to analyze, 25 MB of
  JSON per 20k names).
* Memory (``[memory]`` events) and the profiler's FLOP estimates per op row, per
  step, where the trace has them (``trace/opcolumns.py``).
* Peak memory per layer: how far allocated memory rose above its level at the
  layer span's entry, at the highest point inside it (``[memory]`` events on
  the span's thread and the given device kind), the largest over its calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layerprof.pivot.notes import Note
from layerprof.pivot.profile import ancestors
from layerprof.pivot.records import OpSamples, OpStat
from layerprof.pivot.sections.trace import Steps
from layerprof.stats import Series
from layerprof.trace.columns import unique, unset
from layerprof.trace.events import I64, LAYER, OP, EventTables, HostSpans
from layerprof.trace.modules import step_index
from layerprof.trace.nesting import MAX_LEVELS, Nesting
from layerprof.trace.opcolumns import op_columns
from layerprof.trace.ops import OpTimes, merged_roots

UNATTRIBUTED = "(unattributed)"
BACKWARD_NODE = "autograd::engine::evaluate_function: "
#: Operator rows a trace's profile keeps (the most self time first); about 1 KB of
#: JSON and 1 ms of statistics each.
MAX_OP_ROWS = 5000
#: The name of the row that sums a layer's operators beyond ``MAX_OP_ROWS``.
OTHER_OPS = "(other operators)"


@dataclass(frozen=True)
class _Attribution:
    """Per host span (HostSpans indexing): its layer path id, phase and backward node.

    ``layer`` indexes ``paths`` (-1: unattributed); ``node`` is the outermost
    backward node enclosing the op (itself included), -1 for forward ops.
    """

    paths: tuple[str, ...]
    layer: I64
    node: I64

    def path_of(self, i: int) -> str:
        k = int(self.layer[i])
        return self.paths[k] if k >= 0 else UNATTRIBUTED


def attribute(tables: EventTables, nesting: Nesting) -> _Attribution:
    host = tables.host
    n = len(host)
    layer_spans = np.flatnonzero(host.kind == LAYER)
    node = _backward_nodes(tables, nesting)
    if len(layer_spans) == 0:  # every op, forward or backward, is unattributed
        return _Attribution(paths=(), layer=unset(n), node=node)
    paths = tuple(sorted({tables.names[int(i)] for i in unique(host.name[layer_spans])}))
    path_id = {p: k for k, p in enumerate(paths)}
    span_path = np.full(n, -1, dtype=np.int64)
    for i in layer_spans.tolist():
        span_path[i] = path_id[tables.names[int(host.name[i])]]
    layer = np.full(n, -1, dtype=np.int64)
    is_op = host.kind == OP
    inside = is_op & (nesting.parent_layer >= 0)
    layer[inside] = span_path[nesting.parent_layer[inside]]
    del span_path, inside
    backward = node >= 0
    forward_layer = _forward_layer_by_seq(host, layer, is_op & ~backward)
    node_ops = np.flatnonzero(backward)
    if len(node_ops):
        seqs = host.seq[node[node_ops]]
        layer[node_ops] = [forward_layer.get(int(s), -1) for s in seqs.tolist()]
    return _Attribution(paths=paths, layer=layer, node=node)


def _backward_nodes(tables: EventTables, nesting: Nesting) -> I64:
    """Outermost ``evaluate_function`` op enclosing each op (itself included), else -1."""
    host = tables.host
    node_names = np.fromiter(
        (i for i, name in enumerate(tables.names) if name.startswith(BACKWARD_NODE)),
        dtype=np.int64,
    )
    if len(node_names) == 0:
        return unset(len(host))
    is_op = host.kind == OP
    is_node = is_op & np.isin(host.name, node_names)
    return _outermost(nesting.parent_op, nesting.order, is_op, is_node)


def _outermost(parent: I64, order: I64, members: np.ndarray, marked: np.ndarray) -> I64:
    """Per span: the outermost marked span on the chain of ``parent`` links up from it
    (itself included) among ``members`` (masks; the parents of members are members,
    ``order`` puts parents first), else -1.

    Vectorized: every chain climbs a level at a time; the last marked span met is the
    outermost. Past ``MAX_LEVELS`` levels the one-pass loop takes over.
    """
    out = np.full(len(parent), -1, dtype=np.int64)
    at = np.flatnonzero(members)
    out[at] = np.where(marked[at], at, -1)
    above = parent[at]
    for _ in range(MAX_LEVELS):
        up = above >= 0
        at, above = at[up], above[up]
        if len(at) == 0:
            return out
        out[at] = np.where(marked[above], above, out[at])
        above = parent[above]
    return _outermost_loop(parent, order, members, marked)


def _outermost_loop(parent: I64, order: I64, members: np.ndarray, marked: np.ndarray) -> I64:
    par = parent.tolist()
    flags = marked.tolist()
    out = [-1] * len(flags)
    for i in order[members[order]].tolist():  # parents before children
        p = par[i]
        if p >= 0 and out[p] >= 0:
            out[i] = out[p]
        elif flags[i]:
            out[i] = i
    return np.asarray(out, dtype=np.int64)


def _forward_layer_by_seq(host: HostSpans, layer: I64, forward: np.ndarray) -> dict[int, int]:
    """Sequence number -> layer of the forward op that created the node with that number.

    Every op records the number the *next* graph node will get, so ops that
    create no node (``x != 0`` on integer indices, ``torch.ones`` for a mask)
    share it with the op that does, and run before it: the creator is the
    last op on its thread to start with that number (a nested op lies in its
    outer op's layer). Ops outside every layer count too (the loss's node
    stays unattributed). Numbers whose creators on two threads lie in two
    layers are ambiguous and left out.
    """
    idx = np.flatnonzero(forward & (host.seq >= 0))
    idx = idx[np.lexsort((host.start[idx], host.seq[idx], host.thread[idx]))]
    last: dict[tuple[int, int], int] = {}  # (thread, seq) -> layer of its latest op
    for t, s, k in zip(
        host.thread[idx].tolist(), host.seq[idx].tolist(), layer[idx].tolist(), strict=True
    ):
        last[(t, s)] = k
    out: dict[int, int] = {}
    ambiguous: set[int] = set()
    for (_, s), k in last.items():
        if out.setdefault(s, k) != k:
            ambiguous.add(s)
    return {s: k for s, k in out.items() if s not in ambiguous and k >= 0}


# ---- per step ---------------------------------------------------------------------------


def step_of(steps: Steps, starts: I64) -> tuple[I64, int]:
    """Complete-step index of each start (-1 outside) and the number of steps (>= 1)."""
    n = len(steps.complete)
    if n == 0 or steps.source == "trace":
        return np.zeros(len(starts), dtype=np.int64), 1
    return step_index(steps, starts), n


def layer_ops(
    tables: EventTables,
    nesting: Nesting,
    times: OpTimes,
    attribution: _Attribution,
    steps: Steps,
    *,
    by_shape: bool = False,
    has_device: bool = False,
) -> tuple[OpStat, ...]:
    """One OpStat per (layer, op name[, input shapes], phase), samples per step;
    largest median self time first."""
    host = tables.host
    idx = np.flatnonzero(host.kind == OP)
    if len(idx) == 0:
        return ()
    # Same-name single-child ops merge into their parent, as in key_averages (trace/ops.py):
    # grouped under the top op, they add their self time and nothing else.
    top = merged_roots(tables, nesting)[idx]
    step, n_steps = step_of(steps, host.start[top])
    keep = step >= 0
    idx, top, step = idx[keep], top[keep], step[keep]
    if len(idx) == 0:
        return ()
    counted = top == idx
    n_paths = len(attribution.paths) + 1
    n_shapes = len(tables.shapes) + 1
    # The group key, built in place: a 4 GB trace has ~5M ops, 40 MB a column.
    key = host.name[top] * n_paths
    key += attribution.layer[top] + 1  # 0 = unattributed
    key *= n_shapes
    if by_shape:
        key += host.shape[top] + 1
    key *= 2
    key += attribution.node[top] >= 0  # the phase: 1 = backward
    del top
    uniq, group = np.unique(key, return_inverse=True)
    del key
    cells = group * n_steps + step
    del group, step
    size = len(uniq) * n_steps

    def per_step(values: I64, inclusive: bool = False) -> np.ndarray:
        weights = values[idx].astype(np.float64)
        if inclusive:  # merged ops' totals are their top op's
            weights[~counted] = 0.0
        sums = np.bincount(cells, weights=weights, minlength=size)
        return np.rint(sums).astype(np.int64).reshape(len(uniq), n_steps)

    calls = np.rint(np.bincount(cells, weights=counted, minlength=size)).astype(np.int64)
    calls = calls.reshape(len(uniq), n_steps)
    extra = {
        key: per_step(values, inclusive)
        for key, (values, inclusive) in op_columns(tables, nesting).items()
    }
    self_ns = per_step(nesting.self_ns)
    total_ns = per_step(host.dur, inclusive=True)
    device_ns = per_step(times.device_total, inclusive=True) if has_device else None
    columns = _OpColumns(calls, self_ns, total_ns, device_ns, extra)
    kept = _kept_groups(self_ns)
    rows: list[OpStat] = []
    for g, k in zip(kept.tolist(), uniq[kept].tolist(), strict=True):
        k, ph = divmod(k, 2)
        k, sh = divmod(k, n_shapes)
        name_id, lay = divmod(k, n_paths)
        row = columns.row(
            [g],
            tables.names[name_id],
            layer=attribution.paths[lay - 1] if lay else UNATTRIBUTED,
            shapes=tables.shapes[sh - 1] if sh else None,
            phase="backward" if ph else "forward",
        )
        rows.append(row)
    rows += _other_rows(columns, uniq, kept, n_shapes, n_paths, attribution.paths)
    rows.sort(key=lambda o: (-o.self_ns, o.layer or "", o.name))
    return tuple(rows)


@dataclass(frozen=True)
class _OpColumns:
    """Per op group and step: calls, self, total and device time, optional columns."""

    calls: np.ndarray
    self_ns: np.ndarray
    total_ns: np.ndarray
    device_ns: np.ndarray | None
    extra: dict[str, np.ndarray]

    def row(
        self, groups: list[int], name: str, *, layer: str, phase: str, shapes: str | None = None
    ) -> OpStat:
        """The row of ``groups`` summed per step (one group: that op's own row)."""

        def summed(values: np.ndarray) -> np.ndarray:
            picked: np.ndarray = values[groups[0] if len(groups) == 1 else groups]
            return picked if len(groups) == 1 else picked.sum(axis=0)

        samples = OpSamples(
            calls=Series(summed(self.calls)),
            self_ns=Series(summed(self.self_ns)),
            total_ns=Series(summed(self.total_ns)),
            device_ns=Series(summed(self.device_ns)) if self.device_ns is not None else None,
        )
        row = OpStat.of(name, samples, layer=layer, input_shapes=shapes, phase=phase)
        if not self.extra:
            return row
        return row.with_columns({k: summed(v) for k, v in self.extra.items()})


def _kept_groups(self_ns: np.ndarray) -> np.ndarray:
    """The op groups that get a row of their own, in group order: all of them, or the
    ``MAX_OP_ROWS`` with the most self time over all steps (ties: the first)."""
    n = len(self_ns)
    if n <= MAX_OP_ROWS:
        return np.arange(n)
    order = np.argsort(-self_ns.sum(axis=1), kind="stable")
    return np.sort(order[:MAX_OP_ROWS])


def _other_rows(
    columns: _OpColumns,
    uniq: np.ndarray,
    kept: np.ndarray,
    n_shapes: int,
    n_paths: int,
    paths: tuple[str, ...],
) -> list[OpStat]:
    """One ``OTHER_OPS`` row per (layer, phase) for the groups without a row of their own."""
    rest = np.setdiff1d(np.arange(len(uniq)), kept, assume_unique=True)
    if len(rest) == 0:
        return []
    phase = uniq[rest] % 2
    layer = (uniq[rest] // 2 // n_shapes) % n_paths
    rows = []
    for lay, ph in sorted(set(zip(layer.tolist(), phase.tolist(), strict=True))):
        groups = rest[(layer == lay) & (phase == ph)].tolist()
        rows.append(
            columns.row(
                groups,
                OTHER_OPS,
                layer=paths[lay - 1] if lay else UNATTRIBUTED,
                phase="backward" if ph else "forward",
            )
        )
    return rows


def other_ops_notes(ops: tuple[OpStat, ...]) -> list[Note]:
    """The note a profile carries when its operator rows were capped at ``MAX_OP_ROWS``."""
    summed = [o for o in ops if o.name == OTHER_OPS]
    if not summed:
        return []
    return [
        Note(
            "ops-capped",
            f"the trace has more distinct operators than the {MAX_OP_ROWS} with the most"
            f" self time listed; the others are summed into {len(summed)} '{OTHER_OPS}'"
            " row(s), one per layer and phase, so the times still add up",
            {"max_rows": MAX_OP_ROWS, "summed_rows": len(summed)},
        )
    ]


def backward_times(
    tables: EventTables,
    attribution: _Attribution,
    steps: Steps,
    paths: list[str],
) -> dict[str, tuple[Series, Series]]:
    """Per layer path: (backward total, backward self) per step; empty without backward ops."""
    host = tables.host
    top = np.flatnonzero(attribution.node == np.arange(len(host)))
    if len(top) == 0:
        return {}
    step, n_steps = step_of(steps, host.start[top])
    own = {p: np.zeros(n_steps, dtype=np.int64) for p in paths}
    for i, s in zip(top.tolist(), step.tolist(), strict=True):
        path = attribution.path_of(i)
        if s >= 0 and path in own:
            own[path][s] += int(host.dur[i])
    total = {p: v.copy() for p, v in own.items()}
    for path, values in own.items():
        for anc in ancestors(path):
            if anc in total:
                total[anc] += values
    return {p: (Series(total[p]), Series(own[p])) for p in paths}


def layer_peaks(tables: EventTables, *, on_device: bool) -> dict[str, int]:
    """Per layer path: the largest rise of allocated memory above its level at the span's
    entry, at the highest point inside the span (host allocations, or device ones)."""
    host, mem = tables.host, tables.memory
    if len(mem) == 0:
        return {}
    device_kind = np.asarray([not d.startswith("cpu") for d in tables.memory_devices], dtype=bool)
    chosen = device_kind[mem.device] == on_device
    peaks: dict[str, int] = {}
    spans = np.flatnonzero(host.kind == LAYER)
    for thread in unique(mem.thread[chosen]).tolist():
        on = np.flatnonzero(chosen & (mem.thread == thread))
        on = on[np.argsort(mem.ts[on], kind="stable")]
        ts = mem.ts[on]
        level = np.concatenate([[0], np.cumsum(mem.bytes[on])])  # level[k]: before event k
        for i in spans[host.thread[spans] == thread].tolist():
            lo = np.searchsorted(ts, host.start[i], "left")
            hi = np.searchsorted(ts, host.start[i] + host.dur[i], "left")
            if hi <= lo:
                continue
            rise = int(level[lo + 1 : hi + 1].max() - level[lo])
            path = tables.names[int(host.name[i])]
            peaks[path] = max(peaks.get(path, 0), rise, 0)
    return peaks
