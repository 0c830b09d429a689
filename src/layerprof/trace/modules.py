"""Layer trees from layerprof layer spans, ``nn.Module: Class_k`` spans and annotations.

A trace exported by layerprof (``render/chrome.py``) has a ``layerprof_layer``
span per module call, named by the module's qualified path (``layers.0.attn``;
the root's path is ``""``), which the reader puts back on the thread that ran
it. Those are the preferred source: real paths, the same calls the live run
measured. A layer nested in a call of the same path (recursion) counts its
self time and calls but not its total again, as the live run does.

A module span's path joins the names of the module spans enclosing it on the
same thread; ``k`` in ``Class_k`` counts instances of the class in the
profiler session, so the rows are then renamed by structure (``structural``:
``Net.Sequential.Linear[1]``), which two traces of one model share. Host total/self
follow ops (self = total minus the union of direct child modules); device
time is that of the kernels launched inside, inclusive and own. Times are
also split per complete step, which is what the Profile pivot samples.
Annotation trees work the same; ``ProfilerStep#N`` spans are the steps, not
tree nodes, and dots in annotation names become ``_`` in paths (the rows' names
keep them: ``Optimizer.step#SGD.step``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from layerprof.pivot.sections.trace import Steps
from layerprof.trace.events import ANNOTATION, I64, LAYER, MODULE, MODULE_PREFIX, EventTables
from layerprof.trace.links import Links
from layerprof.trace.nesting import Nesting, roll_up
from layerprof.trace.steps import STEP_NAME
from layerprof.traceformat import MODULE_TYPES_KEY


@dataclass(frozen=True)
class TreeRow:
    """One node of a module or annotation tree, summed over the whole trace."""

    path: str
    name: str
    type: str
    parent: str | None
    calls: int
    total_ns: int
    self_ns: int
    device_ns: int | None
    device_self_ns: int | None
    step_total_ns: tuple[int, ...]  # per complete step
    step_self_ns: tuple[int, ...]
    step_device_ns: tuple[int, ...] | None
    step_device_self_ns: tuple[int, ...] | None
    step_calls: tuple[int, ...]


def tree(
    tables: EventTables,
    nesting: Nesting,
    links: Links,
    steps: Steps,
    kind: int,
    types: dict[str, str] | None = None,
) -> tuple[TreeRow, ...]:
    """Rows in first-seen (pre-order) order; empty when the trace has no such spans.

    ``types`` (LAYER only): path -> module class, from the trace's layerprof
    marker; the root's class also comes from its span's name.
    """
    host = tables.host
    members = np.flatnonzero(host.kind == kind)
    if kind == ANNOTATION:
        step_names = [i for i, n in enumerate(tables.names) if STEP_NAME.match(n)]
        members = members[~np.isin(host.name[members], step_names)]
    if len(members) == 0:
        return ()
    parent = nesting.parent_of_kind(kind)
    has_device = tables.has_device
    own = np.zeros(len(host), dtype=np.int64)
    if has_device:
        owner = np.full(len(tables.device), -1, dtype=np.int64)
        via_rt = links.runtime >= 0
        owner[via_rt] = parent[links.runtime[via_rt]]
        via_op = (owner < 0) & (links.op >= 0)
        owner[via_op] = parent[links.op[via_op]]
        hit = owner >= 0
        np.add.at(own, owner[hit], tables.device.dur[hit])  # int64 at once, as in ops.py
    inclusive = roll_up(own, parent, nesting.order, members)
    n_steps = len(steps.complete)

    is_member = np.zeros(len(host), dtype=bool)
    is_member[members] = True
    seq = nesting.order[is_member[nesting.order]]  # the members, parents first
    del is_member
    # Python values of the members only (a trace's ops outnumber its modules or
    # annotations by far): a list per column of every span cost ~130 B a span.
    columns = (host.name, host.dur, nesting.self_ns, inclusive, own, parent)
    name_ids, durs, selfs, incl, owns, parents = (c[seq].tolist() for c in columns)
    step_list = step_index(steps, host.start[seq]).tolist()
    del inclusive, own
    order = seq.tolist()
    par = dict(zip(order, parents, strict=True))
    paths: dict[int, str] = {}
    acc: dict[str, _Acc] = {}
    names = tables.names
    types = types or {}
    labels = tables.layer_labels
    for k, i in enumerate(order):
        raw = names[name_ids[k]]
        p = par[i]
        parent_path = paths.get(p) if p >= 0 else None
        if kind == LAYER:
            path = raw
            paths[i] = path
            a = acc.get(path)
            if a is None:
                type_ = types.get(path) or labels.get(path) or "layer"
                short = path.rsplit(".", 1)[-1] if path else labels.get(path, type_)
                a = acc[path] = _Acc(short, type_, parent_path, n_steps)
            if _inside_same(i, path, par, paths):
                a.add_nested(selfs[k], owns[k], step_list[k])
            else:
                a.add(durs[k], selfs[k], incl[k], owns[k], step_list[k])
            continue
        short = raw[len(MODULE_PREFIX) :] if kind == MODULE else raw.replace(".", "_")
        path = f"{parent_path}.{short}" if parent_path else short
        paths[i] = path
        a = acc.get(path)
        if a is None:
            # the name stays as written (Optimizer.step#SGD.step); only the path, whose
            # dots separate levels, spells an annotation's dots as "_"
            name = short if kind == MODULE else raw
            a = acc[path] = _Acc(name, _type_of(short, kind), parent_path, n_steps)
        a.add(durs[k], selfs[k], incl[k], owns[k], step_list[k])
    return tuple(acc[path].row(path, has_device) for path in _pre_order(acc))


def _pre_order(acc: dict[str, _Acc]) -> list[str]:
    """Paths parent-first (depth-first), siblings in first-seen order: a child first
    seen in a later step must still print under its own parent."""
    kids: dict[str | None, list[str]] = {}
    for path, a in acc.items():
        parent = a.parent if a.parent in acc else None
        kids.setdefault(parent, []).append(path)
    out: list[str] = []
    stack = list(reversed(kids.get(None, [])))
    while stack:
        path = stack.pop()
        out.append(path)
        stack.extend(reversed(kids.get(path, [])))
    return out


def _inside_same(i: int, path: str, par: dict[int, int], paths: dict[int, str]) -> bool:
    """Whether a span of the same path encloses span ``i`` (a recursive call)."""
    p = par[i]
    while p >= 0:
        if paths.get(p) == path:
            return True
        p = par[p]
    return False


def _type_of(short: str, kind: int) -> str:
    if kind != MODULE:
        return "record_function"
    head, _, tail = short.rpartition("_")
    return head if head and tail.isdigit() else short


def step_index(steps: Steps, starts: I64) -> I64:
    """Index of the complete step each start falls in, -1 outside all of them."""
    done = steps.complete
    if not done or steps.source == "trace":
        return np.full(len(starts), 0 if done else -1, dtype=np.int64)
    lo = np.asarray([s.start_ns for s in done], dtype=np.int64)
    hi = np.asarray([s.end_ns for s in done], dtype=np.int64)
    order = np.argsort(lo, kind="stable")
    # In place where it can be: ``starts`` may be every op of a 4 GB trace (5M).
    pos = np.searchsorted(lo[order], starts, side="right")
    pos -= 1  # the last step starting at or before, -1: none
    ok = pos >= 0
    np.maximum(pos, 0, out=pos)
    cand: I64 = order[pos]
    del pos
    ok &= starts < hi[cand]
    cand[~ok] = -1
    return cand


class _Acc:
    """Running sums for one path (a plain mutable helper, never exposed)."""

    def __init__(self, name: str, type_: str, parent: str | None, n_steps: int) -> None:
        self.name, self.type, self.parent = name, type_, parent
        self.calls = self.total = self.self_ = self.device = self.device_self = 0
        self.s_total = [0] * n_steps
        self.s_self = [0] * n_steps
        self.s_dev = [0] * n_steps
        self.s_dev_self = [0] * n_steps
        self.s_calls = [0] * n_steps

    def add(self, total: int, self_: int, device: int, device_self: int, step: int) -> None:
        self.calls += 1
        self.total += total
        self.self_ += self_
        self.device += device
        self.device_self += device_self
        if step >= 0:
            self.s_total[step] += total
            self.s_self[step] += self_
            self.s_dev[step] += device
            self.s_dev_self[step] += device_self
            self.s_calls[step] += 1

    def add_nested(self, self_: int, device_self: int, step: int) -> None:
        """A call inside a call of the same path: its total is already counted."""
        self.calls += 1
        self.self_ += self_
        self.device_self += device_self
        if step >= 0:
            self.s_self[step] += self_
            self.s_dev_self[step] += device_self
            self.s_calls[step] += 1

    def row(self, path: str, has_device: bool) -> TreeRow:
        # A "nested" same-path span that overlaps past its outer span's end (a
        # trace quirk) adds self time beyond the outer total: keep self <= total.
        self.total = max(self.total, self.self_)
        self.s_total = [max(t, s) for t, s in zip(self.s_total, self.s_self, strict=True)]
        return TreeRow(
            path=path,
            name=self.name,
            type=self.type,
            parent=self.parent,
            calls=self.calls,
            total_ns=self.total,
            self_ns=self.self_,
            device_ns=self.device if has_device else None,
            device_self_ns=self.device_self if has_device else None,
            step_total_ns=tuple(self.s_total),
            step_self_ns=tuple(self.s_self),
            step_device_ns=tuple(self.s_dev) if has_device else None,
            step_device_self_ns=tuple(self.s_dev_self) if has_device else None,
            step_calls=tuple(self.s_calls),
        )


def renamed(rows: tuple[TreeRow, ...], mapping: dict[str, str]) -> tuple[TreeRow, ...]:
    """Rows with trace paths (``Net_0.Linear_1``) replaced by qualified names.

    ``mapping`` comes from the trace itself (layerprof's capture writes
    ``{"layerprof": {"module_paths": {...}}}``); unmapped paths stay as they are.
    """
    if not mapping:
        return rows
    return tuple(
        replace(
            r,
            path=mapping.get(r.path, r.path),
            parent=None if r.parent is None else mapping.get(r.parent, r.parent),
        )
        for r in rows
    )


def structural(rows: tuple[TreeRow, ...]) -> tuple[TreeRow, ...]:
    """Module rows renamed by their place in the tree, not by torch's instance counters.

    ``nn.Module: Class_k`` counts instances of the class in the order the
    profiler first saw them, so the same model reads ``Conv2d_18`` in one
    trace and ``Conv2d_20`` in another (a module called earlier in the
    session, a different step window). Here each module is named by its class
    alone when no sibling (same parent) has that class, else ``Class[i]``,
    ``i`` counting the siblings of that class in first-call order:
    ``ResNet.Sequential[3].BasicBlock[1].Conv2d[0]``. Two traces of one model
    therefore name its layers alike, and ``diff`` matches them.
    """
    if not rows:
        return rows
    siblings: dict[tuple[str | None, str], int] = {}
    place: dict[str, int] = {}
    for r in rows:  # pre-order: each sibling group in first-call order
        key = (r.parent, r.type)
        place[r.path] = siblings.get(key, 0)
        siblings[key] = place[r.path] + 1
    new: dict[str, str] = {}
    short: dict[str, str] = {}
    for r in rows:
        alone = siblings[(r.parent, r.type)] == 1
        name = r.type if alone else f"{r.type}[{place[r.path]}]"
        parent = new.get(r.parent) if r.parent is not None else None
        new[r.path] = f"{parent}.{name}" if parent else name
        short[r.path] = name
    return tuple(
        replace(
            r,
            path=new[r.path],
            name=short[r.path],
            parent=None if r.parent is None else new.get(r.parent, r.parent),
        )
        for r in rows
    )


def _layerprof_marker(header: dict[str, Any]) -> dict[str, Any] | None:
    """The ``"layerprof"`` object a layerprof-exported trace carries at its top level."""
    info = header.get("layerprof")
    return info if isinstance(info, dict) else None


def module_types(header: dict[str, Any]) -> dict[str, str]:
    """Module path -> class name of every module of the run (module order), if written."""
    info = _layerprof_marker(header) or {}
    types = info.get(MODULE_TYPES_KEY)
    if not isinstance(types, dict):
        return {}
    return {str(k): str(v) for k, v in types.items()}


def module_paths(header: dict[str, Any]) -> dict[str, str]:
    """The trace-path -> qualified-name map a layerprof-written trace carries."""
    info = header.get("layerprof")
    paths = info.get("module_paths") if isinstance(info, dict) else None
    if not isinstance(paths, dict):
        return {}
    return {str(k): str(v) for k, v in paths.items()}
