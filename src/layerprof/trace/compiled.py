"""Compiled kernel time -> module paths, from a profiled run's event tables.

No torch here: the input is the trace engine's :class:`EventTables` (from the
profiler's in-memory results, or a Chrome trace in tests) and the graphs'
:class:`GraphRecord` s. Per forward window (layerprof's own range around each
profiled call) and per ``## Call CompiledFxGraph <key> ##`` event in it:

1. the graph: its record by cache key (records without a key: the one whose
   call sites align best with the events);
2. the prefix: the compiled frame's module path, from the innermost eager
   ``layer:`` span around the call (layerprof's hooks fire only outside the
   compiled regions); a backward call takes the prefix of its forward call,
   last in, first out;
3. alignment: the call's direct child events, in time order, against the
   graph's call sites, in order (kernel names repeat, so only order tells
   ``cpp_fused_gelu_view_2`` of block 0 from block 1's); allocations are
   wrapper overhead; any other child is an unmatched kernel event;
4. each matched event's time (host duration; on CUDA also the GPU durations
   of the device ops its launches started, by correlation id) goes to its
   site's nodes' module paths: all of it when they are one path (extern ops
   always are), else split by the rule (``cost``: by the nodes' FLOPs or
   elements; ``lca``: all to their common ancestor; ``equal``).

Who encloses whom is the engine's one rule (``Nesting.parent_any``, from
``trace/nesting.py``): a span that overruns the one it started in is
detached, never the parent of what follows it.

What the kernels do not cover is accounted for, so a window adds up exactly:
``<compiled overhead>`` is the compiled regions' (and Dynamo's cache
lookups') time outside matched kernels, ``<outside compiled region>`` the
rest of the window.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from layerprof.pivot.sections.compiled import PHASES
from layerprof.trace.events import I64, LAYER, RUNTIME, SYNC, EventTables
from layerprof.trace.graphrecord import GraphRecord, NodeInfo, common_ancestor
from layerprof.trace.links import link
from layerprof.trace.nesting import Nesting, nest, roll_up

FORWARD_MARK = "layerprof: compiled forward"
BACKWARD_MARK = "layerprof: compiled backward"
CALL_PREFIX = "## Call CompiledFxGraph "
REGION_PREFIXES = ("Torch-Compiled Region", "CompiledFunctionBackward")
CACHE_LOOKUP = "TorchDynamo Cache Lookup"
# What a generated wrapper calls besides kernels: allocations and views (overhead).
ALLOCATIONS = frozenset(
    {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::as_strided",
     "aten::resize_", "aten::view", "aten::_reinterpret_tensor", "aten::alias",
     "aten::detach", "aten::set_"}
)  # fmt: skip
_GRAPH_PREFIX = re.compile(r"^graph_\d+_")


def kernel_event(name: str) -> str:
    """An event's name as a call site names it: CPU kernels lose their ``graph_<id>_``."""
    return _GRAPH_PREFIX.sub("", name, count=1)


def align(events: Sequence[str], sites: Sequence[str]) -> list[int]:
    """Per event, the index of the call site it is (-1: none), matching in order.

    An event takes the first site at or after the last match with its name:
    sites that did not run are skipped, events no site names stay unmatched.
    """
    out: list[int] = []
    j = 0
    for name in events:
        k = next((k for k in range(j, len(sites)) if sites[k] == name), -1)
        out.append(k)
        if k >= 0:
            j = k + 1
    return out


def split_time(ns: int, weights: Mapping[str, float], rule: str) -> dict[str, int]:
    """``ns`` over paths (whole ns, summing to ``ns`` exactly).

    ``weights`` are each path's summed node cost; ``cost`` splits by them (equal
    when all are zero), ``equal`` evenly, ``lca`` gives all to the paths' common ancestor.
    """
    paths = sorted(weights)
    if len(paths) == 1:
        return {paths[0]: ns}
    if rule == "lca":
        return {common_ancestor(paths): ns}
    even = rule == "equal" or sum(weights.values()) <= 0
    return _apportion(ns, {p: 1.0 if even else weights[p] for p in paths})


def _apportion(ns: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Largest remainders: integer parts that add up to ``ns``."""
    total = sum(shares.values())
    raw = {p: ns * s / total for p, s in shares.items()}
    out = {p: int(v) for p, v in raw.items()}
    rest = ns - sum(out.values())
    for p in sorted(raw, key=lambda p: raw[p] - out[p], reverse=True)[:rest]:
        out[p] += 1
    return out


def _join_path(prefix: str, rel: str) -> str:
    if not prefix:
        return rel
    return f"{prefix}.{rel}" if rel else prefix


# ---- results ----------------------------------------------------------------------


@dataclass
class _KernelTotal:
    """One kernel event name over the whole capture."""

    name: str
    extern: bool
    phase: str
    calls: int = 0
    host_ns: int = 0
    device_ns: int = 0
    by_path: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    estimated: bool = False


@dataclass
class _GraphUse:
    record: GraphRecord
    calls: int = 0
    host_ns: int = 0
    device_ns: int = 0


@dataclass
class PhaseWindow:
    """One window (a forward or a backward) and where its time went, in ns."""

    span_ns: int
    paths: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    device_paths: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    region_ns: int = 0
    lookup_ns: int = 0
    kernel_ns: int = 0
    shared_ns: int = 0
    unmatched_ns: int = 0
    device_overhead_ns: int = 0
    device_outside_ns: int = 0

    @property
    def overhead_ns(self) -> int:
        return self.region_ns + self.lookup_ns - self.kernel_ns

    @property
    def outside_ns(self) -> int:
        return self.span_ns - self.region_ns - self.lookup_ns


@dataclass
class CompiledAttribution:
    """Everything the section and the layer rows are built from."""

    windows: dict[str, list[PhaseWindow]]  # phase -> one window per iteration
    kernels: dict[tuple[str, str], _KernelTotal]
    graphs: dict[int, _GraphUse]  # id(record) -> use
    exact: dict[tuple[str, str], int]  # (phase, path) -> ns
    estimated: dict[tuple[str, str], int]
    unmatched: dict[str, list[int]]  # event name -> [calls, host ns]
    unresolved_nodes: int = 0
    inferred_nodes: int = 0
    unknown_graphs: int = 0
    backward_prefix_missing: int = 0
    device: bool = False
    #: phase -> kernel time (host ns) credited to nodes without a module stack, by cost
    stackless_ns: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def iterations(self, phase: str = "forward") -> int:
        return len(self.windows.get(phase, ()))


# ---- the walk -----------------------------------------------------------------------


@dataclass(frozen=True)
class ModelPaths:
    """The model's module paths and their class names (for checking resolved paths)."""

    types: Mapping[str, str]

    def resolve(self, prefix: str, node: NodeInfo) -> str | None:
        if node.path is None:
            return None
        path = _join_path(prefix, node.path)
        found = self.types.get(path)
        if found is None or (node.type is not None and node.path and found != node.type):
            return None
        return path


def attribute_compiled(
    tables: EventTables,
    records: Sequence[GraphRecord],
    paths: ModelPaths,
    *,
    rule: str = "cost",
) -> CompiledAttribution:
    """Attribute every compiled call in the capture's forward/backward windows."""
    walk = _Walk(tables, records, paths, rule)
    walk.run()
    return walk.result


class _Walk:
    def __init__(
        self, tables: EventTables, records: Sequence[GraphRecord], paths: ModelPaths, rule: str
    ) -> None:
        self.t = tables
        self.host = tables.host
        self.names: list[str] = [tables.names[i] for i in self.host.name.tolist()]
        self.rule = rule
        self.paths = paths
        self.by_key: dict[str, GraphRecord] = {}
        self.keyless: list[GraphRecord] = []
        for r in records:  # the latest record of a key wins (same key: same code)
            if r.key is None:
                self.keyless.append(r)
            else:
                self.by_key[r.key] = r
        nesting = nest(self.host)
        self.parent = nesting.parent_any()  # the engine's one nesting rule
        self.device_ns = launched(tables, nesting, self.parent)
        self.result = CompiledAttribution(
            windows={p: [] for p in PHASES},
            kernels={},
            graphs={},
            exact=defaultdict(int),
            estimated=defaultdict(int),
            unmatched={},
            device=bool(len(tables.device)),
        )

    # -- structure ----------------------------------------------------------------
    def _children(self) -> dict[int, list[int]]:
        kids: dict[int, list[int]] = defaultdict(list)
        for i, p in enumerate(self.parent.tolist()):
            if p >= 0:
                kids[p].append(i)
        starts = self.host.start
        for v in kids.values():
            v.sort(key=lambda i: int(starts[i]))
        return kids

    def _ancestor(self, i: int, test: object) -> int:
        p = int(self.parent[i])
        while p >= 0:
            if test(p):  # type: ignore[operator]
                return p
            p = int(self.parent[p])
        return -1

    # -- windows --------------------------------------------------------------------
    def _windows(self) -> list[tuple[int, str]]:
        marks = {FORWARD_MARK: "forward", BACKWARD_MARK: "backward"}
        found = [(int(self.host.start[i]), i) for i, n in enumerate(self.names) if n in marks]
        return [(i, marks[self.names[i]]) for _, i in sorted(found)]

    def _window_of(self, windows: list[tuple[int, str]]) -> np.ndarray:
        """Per host span, the index of the window it lies in (-1: none)."""
        host = self.host
        out = np.full(len(host), -1, dtype=np.int64)
        if not windows:
            return out
        index = np.asarray([w for w, _ in windows], dtype=np.int64)
        lo, hi = host.start[index], host.end[index]
        pos = np.searchsorted(lo, host.start, side="right") - 1
        ok = (pos >= 0) & (host.end <= hi[np.clip(pos, 0, None)])
        out[ok] = pos[ok]
        out[index] = -1  # a window is not inside itself
        return out

    def run(self) -> None:
        windows = self._windows()
        win_of = self._window_of(windows)
        result = self.result
        spans: list[PhaseWindow] = []
        for w, phase in windows:
            spans.append(PhaseWindow(span_ns=int(self.host.dur[w])))
            result.windows[phase].append(spans[-1])
        self._regions(spans, win_of)
        kids = self._children()
        order = np.argsort(self.host.start, kind="stable").tolist()
        fwd_prefixes: dict[str, list[str]] = defaultdict(list)  # compile id -> prefixes
        current = -1
        for c in order:
            k = int(win_of[c])
            if k < 0 or not self.names[c].startswith(CALL_PREFIX):
                continue
            phase = windows[k][1]
            if k != current and phase == "forward":
                fwd_prefixes.clear()  # a new iteration
            current = k
            self._call(c, phase, spans[k], kids.get(c, []), fwd_prefixes)

    def _is_region(self, i: int) -> bool:
        return self.names[i].startswith(REGION_PREFIXES)

    def _regions(self, spans: list[PhaseWindow], win_of: np.ndarray) -> None:
        """Outermost compiled regions and cache lookups in each window; on CUDA, the
        GPU time their launches started (overhead until a kernel row takes it)."""
        dur = self.host.dur.tolist()
        kinds = self.host.kind.tolist()
        launched = self.device_ns.tolist()
        for i, k in enumerate(win_of.tolist()):
            if k < 0:
                continue
            outer = self._ancestor(i, self._is_region) < 0
            if self._is_region(i) and outer:
                spans[k].region_ns += dur[i]
            elif self.names[i] == CACHE_LOOKUP and outer:
                spans[k].lookup_ns += dur[i]
            if launched[i] and kinds[i] in (RUNTIME, SYNC):
                if outer and not self._is_region(i):
                    spans[k].device_outside_ns += launched[i]
                else:
                    spans[k].device_overhead_ns += launched[i]

    # -- one compiled call --------------------------------------------------------------
    def _call(
        self,
        c: int,
        phase: str,
        window: PhaseWindow,
        children: list[int],
        fwd_prefixes: dict[str, list[str]],
    ) -> None:
        kinds = self.host.kind.tolist()
        events = [k for k in children if kinds[k] not in (RUNTIME, SYNC)]
        names = [kernel_event(self.names[k]) for k in events]
        record = self._record(self.names[c][len(CALL_PREFIX) :].removesuffix(" ##"), phase, names)
        if record is None:
            self.result.unknown_graphs += 1
            self._unmatched(events, window)
            return
        prefix = self._prefix(c, record, phase, fwd_prefixes)
        use = self.result.graphs.setdefault(id(record), _GraphUse(record))
        use.calls += 1
        matches = align(names, record.site_events())
        unmatched = []
        for k, site_index in zip(events, matches, strict=True):
            if site_index < 0:
                if self.names[k] not in ALLOCATIONS:
                    unmatched.append(k)
                continue
            self._credit(k, record, site_index, prefix, phase, window, use)
        self._unmatched(unmatched, window)

    def _record(self, key: str, phase: str, names: list[str]) -> GraphRecord | None:
        if key != "None":
            return self.by_key.get(key)
        candidates = [r for r in self.keyless if r.phase == phase] or self.keyless
        best, score = None, 0
        for r in reversed(candidates):  # the latest compile first among equals
            hit = sum(1 for m in align(names, r.site_events()) if m >= 0)
            if hit > score:
                best, score = r, hit
        return best

    def _prefix(
        self, c: int, record: GraphRecord, phase: str, fwd_prefixes: dict[str, list[str]]
    ) -> str:
        kinds = self.host.kind
        layer = self._ancestor(c, lambda i: int(kinds[i]) == LAYER)
        if phase == "forward":
            prefix = self.names[layer] if layer >= 0 else ""
            fwd_prefixes[record.compile_id].append(prefix)
            return prefix
        if layer >= 0:
            return self.names[layer]
        # autograd runs a backward graph after its forward's later calls: last in, first out
        stack = fwd_prefixes.get(record.compile_id)
        if stack:
            return stack.pop()
        self.result.backward_prefix_missing += 1
        return ""

    def _credit(
        self,
        k: int,
        record: GraphRecord,
        site_index: int,
        prefix: str,
        phase: str,
        window: PhaseWindow,
        use: _GraphUse,
    ) -> None:
        site = record.sites[site_index]
        host_ns = int(self.host.dur[k])
        device_ns = int(self.device_ns[k])
        weights: dict[str, float] = defaultdict(float)
        nodes = [record.nodes[name] for name in site.nodes]
        cost = sum(n.cost for n in nodes)
        stackless = sum(n.cost for n in nodes if n.stackless)
        if stackless or (nodes and cost == 0 and all(n.stackless for n in nodes)):
            self.result.stackless_ns[phase] += (
                round(host_ns * stackless / cost) if cost else host_ns
            )
        owners: dict[str, float] = defaultdict(float)  # paths of the kernel's matmul/conv nodes
        for node in nodes:
            path = self.paths.resolve(prefix, node)
            self.result.inferred_nodes += node.inferred
            if path is None:
                self.result.unresolved_nodes += 1
                path = prefix
            weights[path] += node.cost
            if node.compute:
                owners[path] += node.cost
        for name in site.operands:  # an extern op's operands laid out by this kernel
            node = record.nodes[name]
            weights[self.paths.resolve(prefix, node) or prefix] += node.operand_cost
        if any(w > 0 for w in weights.values()):
            # views and getitems compute nothing: a path with only those takes no share
            weights = defaultdict(float, {p: w for p, w in weights.items() if w > 0})
        if not weights:
            weights[prefix] = 0.0
        shared = len(weights) > 1
        host_split, device_split = self._split(host_ns, device_ns, weights, owners)
        window.kernel_ns += host_ns
        use.host_ns += host_ns
        use.device_ns += device_ns
        if shared:
            window.shared_ns += host_ns
        for path, ns in host_split.items():
            window.paths[path] += ns
            (self.result.estimated if shared else self.result.exact)[(phase, path)] += ns
        for path, ns in device_split.items():
            window.device_paths[path] += ns
        if device_ns:
            window.device_overhead_ns -= device_ns  # it was counted as region launches
        name = self.names[k]
        total = self.result.kernels.setdefault(
            (phase, name), _KernelTotal(name=name, extern=site.extern, phase=phase)
        )
        total.calls += 1
        total.host_ns += host_ns
        total.device_ns += device_ns
        total.estimated = total.estimated or shared
        for path, ns in (device_split if device_ns else host_split).items():
            total.by_path[path] += ns

    def _split(
        self,
        host_ns: int,
        device_ns: int,
        weights: Mapping[str, float],
        owners: Mapping[str, float],
    ) -> tuple[dict[str, int], dict[str, int]]:
        """A kernel's time over its paths. A kernel that runs a matmul, convolution or
        attention node belongs to that node's layer (``cost`` and ``equal``): what else
        it computes is the op's epilogue (bias, BatchNorm, activation, residual add),
        whose share no cost model knows, and an elementwise count would hand a
        BatchNorm half of a convolution when the conv's FLOPs are not counted (an
        mkldnn conv+bn+relu op). ``lca`` still gives it to the common ancestor."""
        if owners and len(weights) > 1 and self.rule != "lca":
            weights = {p: w for p, w in owners.items() if w > 0} or dict.fromkeys(owners, 0.0)
        return split_time(host_ns, weights, self.rule), split_time(device_ns, weights, self.rule)

    def _unmatched(self, events: Sequence[int], window: PhaseWindow) -> None:
        for k in events:
            ns = int(self.host.dur[k])
            window.unmatched_ns += ns
            entry = self.result.unmatched.setdefault(self.names[k], [0, 0])
            entry[0] += 1
            entry[1] += ns


def launched(tables: EventTables, nesting: Nesting, parent: I64) -> I64:
    """GPU time of the device ops each host span launched (itself or below it)."""
    n = len(tables.host)
    if not len(tables.device):
        return np.zeros(n, dtype=np.int64)
    links = link(tables, nesting)
    hit = links.runtime >= 0
    own = np.bincount(links.runtime[hit], weights=tables.device.dur[hit], minlength=n)
    # parents first: runtime calls (never anyone's parent) after every span of the sweep
    leaf = np.isin(tables.host.kind[nesting.order], (RUNTIME, SYNC))
    order = np.concatenate([nesting.order[~leaf], nesting.order[leaf]])
    return roll_up(own.astype(np.int64), parent, order, np.arange(n, dtype=np.int64))
