"""Per-layer rows for models whose forward hooks never fire: TorchScript and torch.export.

TorchScript: the profiler's ``with_modules=True`` tags every op with its
``Module Hierarchy`` (``TOP(Net)::forward.blocks(ModuleList)...`` is *not*
what it says: it names each module by the last attribute its caller took,
``TOP(Net)::forward.0(Sequential)::forward.0(Linear)::forward.`` for
``blocks.0.0``). So the module's own code is read first (``call_graph``):
every ``prim::CallMethod`` on a ``prim::GetAttr`` chain in a submodule's
graph is a call site with its real path and how many calls per caller call
the code makes. Each op's hierarchy resolves through these sites to real
paths. Each iteration runs inside a root ``layer:`` range; inside it,
consecutive top-level ops under the same module form one call of it, from its
first op's start to its last op's end (``observed_spans``). Time between ops
of one layer is the layer's self time; time between layers (interpreter
dispatch) is their common ancestor's.

Then ``judge`` walks from the root: a layer's rows are kept only when its
calls per iteration fit what its caller's code makes. Interleaved ops (an
optimized graph moved one), back-to-back calls that look like one, calls in
loops, call sites the hierarchy names alike and ops naming a module the code
does not call leave the layer (and its sub-layers) out, with a note; their
time stays in the caller's self time. Never a wrong row.

torch.export: graph nodes carry ``nn_module_stack`` metadata (original
qualified paths, outermost first). A graph pass over ``program.module()``
inserts ``layer:{path}`` range enter/exit calls where the stack changes, so
the flat, compiled graph runs as exported (``torch.export.unflatten`` would
run the graph through the slower fx interpreter) and the ops-mode
attribution applies unchanged.

Both end in the one trace engine (``layerprof.trace``): the recorded trace is
read as its ``EventTables`` (with each op's Module Hierarchy), and the
TorchScript layer spans are written into it as ``layer:`` ranges, which the
engine reads like the ranges ops mode's hooks open.
"""

from __future__ import annotations

import bisect
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from layerprof.capture.options import OpOptions
from layerprof.capture.platform.device import device_of
from layerprof.capture.profiling.profiler import RawTrace, capture_ops, range_api, trace_loader
from layerprof.capture.quiet import kineto_quiet
from layerprof.errors import ModelRunError
from layerprof.pivot.notes import Note
from layerprof.pivot.records import LayerInfo
from layerprof.trace.columns import ts_from_us
from layerprof.trace.events import LAYER, OP, EventTables
from layerprof.trace.kineto import tables_from_documents
from layerprof.traceformat import EVENTS_KEY, LAYER_RANGE, USER_ANNOTATION

if TYPE_CHECKING:
    import torch


# torch.jit.trace names a module's second and later calls forward1, forward2, ...
_FORWARD = re.compile(r"^forward\d*$")
_SEGMENT = re.compile(r"^(?P<name>[^(]*)\((?P<type>[^)]*)\)::(?P<method>.*)$")


# ---- TorchScript -----------------------------------------------------------------------


@dataclass(frozen=True)
class _ScriptCallSite:
    """A sub-module that a module's TorchScript code calls.

    ``name`` is the last attribute the code took to reach it (``blocks.0`` ->
    ``0``), which is all the profiler's Module Hierarchy shows of it. ``low``
    is how many calls per call of the caller run outside any branch or loop;
    ``high`` adds those inside branches, and is infinite inside a loop.
    """

    path: str
    name: str
    low: int
    high: float


@dataclass
class _CallGraph:
    """Who calls whom: ``prim::CallMethod`` nodes on ``prim::GetAttr`` chains in
    every submodule's graph (calls to its own methods followed)."""

    types: dict[str, str]  # path -> type name, in named_modules() order
    sites: dict[str, dict[str, _ScriptCallSite]]  # caller path -> callee path -> site
    flawed: dict[str, str]  # callee path -> why its rows cannot be trusted
    # layers no call site names, that code may still call (see call_graph)
    suspect: dict[str, str] = field(default_factory=dict)
    # caller -> types of the modules its code calls without naming them
    unnamed: dict[str, set[str]] = field(default_factory=dict)

    def callees(self, caller: str) -> dict[str, _ScriptCallSite]:
        return self.sites.get(caller, {})

    def resolve(self, segments: Sequence[tuple[str, str, str]]) -> tuple[list[str], bool]:
        """Module-hierarchy segments -> the module paths they name, outermost first.

        A call of another method than ``forward`` on a sub-module is no call of
        that layer (eager hooks would not see it): its ops stay with the caller.
        Stops at the first segment that no call site of its caller matches by
        name and type (then False): the op belongs somewhere under the last
        path returned, but not to a module this graph can name. A segment
        that several call sites match (``seq.0`` and ``only.0`` are both
        ``0(Linear)``) stops too, with True: those callees are flawed.
        """
        paths: list[str] = []
        caller = ""
        for k, (name, type_name, method) in enumerate(segments):
            if not _FORWARD.match(method):
                return paths, k == len(segments) - 1
            found = [
                s.path
                for s in self.callees(caller).values()
                if s.name == name and self.types.get(s.path) == type_name
            ]
            if len(found) > 1:
                return paths, True  # callees the hierarchy cannot tell apart: all flawed
            if not found:
                # a module the code got as an argument is known: its ops stay with the caller
                return paths, type_name in self.unnamed.get(caller, ())
            caller = found[0]
            paths.append(caller)
        return paths, True


@dataclass(frozen=True)
class ScriptRows:
    """Per-layer rows of a TorchScript run: layers (untrusted ones left out), the
    recorded trace with the confirmed layers' spans, and notes on what was left out."""

    layers: tuple[LayerInfo, ...]
    raw: RawTrace
    notes: tuple[Note, ...]


@dataclass(frozen=True)
class LayerCall:
    """One call of a layer as rebuilt from its operators: the trace engine's thread
    index and times (ns on the engine's clock), and the iteration it ran in."""

    path: str
    thread: int
    start: int
    end: int
    iteration: int


def script_capture(
    scripted_module: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    *,
    iters: int,
    options: OpOptions | None = None,
) -> ScriptRows:
    """Profile ``iters`` calls with ``with_modules`` and rebuild layer calls from each
    op's Module Hierarchy, keeping only the layers whose calls the code confirms."""
    trace = _profiled_trace(scripted_module, args, kwargs, iters, options or OpOptions())
    recorded = tables_from_documents([trace], keep_hierarchy=True)
    graph = call_graph(scripted_module)
    spans, unresolved = observed_spans(recorded, graph)
    roots = _root_calls(recorded)
    iterations = len(roots) or 1
    verdict = judge(graph, spans, unresolved, iterations)
    # Outer layers first where spans coincide (a wrapper whose only work is one
    # sub-layer), and layers before ops: attribute's sort is stable, so a tie
    # nests the later event inside the earlier one.
    kept = sorted(
        (s for s in spans if s.path in verdict.trusted),
        key=lambda s: (s.thread, s.start, -s.end, s.path.count(".")),
    )
    kept += _zero_time_spans(kept, roots, verdict.empty, graph)
    _add_layer_ranges(trace, recorded, kept)
    # TorchScript's own "forward" method-call records are not operators
    ops_only = {
        **trace,
        EVENTS_KEY: [e for e in trace[EVENTS_KEY] if e.get("name") != "forward"],
    }
    tables = tables_from_documents([ops_only], keep_shapes=(options or OpOptions()).record_shapes)
    layers = tuple(i for i in _script_layers(scripted_module) if not verdict.drops(i.path))
    raw = RawTrace.of_document(trace, tables, device_of(scripted_module))
    return ScriptRows(layers, raw, verdict.notes(scripted_module))


def _profiled_trace(
    module: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    iters: int,
    options: OpOptions,
) -> dict[str, Any]:
    """The Chrome trace of ``iters`` calls, each inside a root ``layer:`` range."""
    import torch

    from layerprof.capture.failures import model_error
    from layerprof.capture.profiling.profiler import profiler_kwargs

    kw = profiler_kwargs(options, device_of(module), iters)
    # The Module Hierarchy of TorchScript ops exists only with with_modules (no other
    # API gives it); some torch builds warn that it is deprecated: not the user's concern.
    kw["with_modules"] = True
    enter, leave = range_api()
    with kineto_quiet(), torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*with_modules.*deprecated", category=FutureWarning
        )
        with torch.profiler.profile(**kw) as prof:
            for _ in range(iters):
                handle = enter(LAYER_RANGE)
                try:
                    module(*args, **(kwargs or {}))
                except (KeyboardInterrupt, ModelRunError):
                    raise
                except Exception as exc:
                    # TorchScript raises from inside the graph: no layer can be named.
                    raise model_error(module, None, exc) from exc
                finally:
                    leave(handle)
                prof.step()
    return trace_loader(prof.profiler.kineto_results)()


def _root_calls(tables: EventTables) -> list[LayerCall]:
    """The per-iteration root ranges (``layer:`` with no path), numbered in time order."""
    host = tables.host
    root = tables.names.index("") if "" in tables.names else -1
    found = np.flatnonzero((host.kind == LAYER) & (host.name == root))
    found = found[np.lexsort((host.start[found], host.thread[found]))]
    return [
        LayerCall("", int(host.thread[i]), int(host.start[i]), int(host.end[i]), k)
        for k, i in enumerate(found.tolist())
    ]


def _tagged_ops(tables: EventTables) -> list[tuple[int, str]]:
    """(host index, Module Hierarchy) of every op that carries one, by thread, then
    start, longest first. TorchScript's own ``forward`` method-call records are no ops."""
    host, names = tables.host, tables.names
    hierarchy = host.hierarchy
    if hierarchy is None:
        return []
    forward = names.index("forward") if "forward" in names else -1
    found = np.flatnonzero((host.kind == OP) & (hierarchy >= 0) & (host.name != forward))
    found = found[np.lexsort((-host.end[found], host.start[found], host.thread[found]))]
    return [(i, names[int(hierarchy[i])]) for i in found.tolist()]


def hierarchy_segments(hierarchy: str) -> list[tuple[str, str, str]]:
    """``TOP(Net)::forward.a(Seq)::forward.0(Conv)::forward.`` ->
    [("a", "Seq", "forward"), ("0", "Conv", "forward")]: (attribute, type, method).

    The root (``TOP``), calls to a module's own methods (``SELF``) and
    function frames (``::relu``) name no sub-module and are left out.
    """
    out: list[tuple[str, str, str]] = []
    for segment in hierarchy.split("."):
        m = _SEGMENT.match(segment)
        if m is not None and m["name"] not in ("TOP", "SELF"):
            out.append((m["name"], m["type"], m["method"]))
    return out


def observed_spans(
    tables: EventTables, graph: _CallGraph
) -> tuple[list[LayerCall], dict[str, str]]:
    """One span per run of consecutive top-level ops under the same module, per
    iteration (a span never crosses an iteration's root range).

    Also returns, per module, a hierarchy under it that names no module its
    code calls: the ops go to that module, its sub-layers cannot be trusted.
    """
    host = tables.host
    starts, ends, threads = host.start.tolist(), host.end.tolist(), host.thread.tolist()
    by_thread: dict[int, list[tuple[int, str]]] = {}
    for i, hier in _tagged_ops(tables):
        by_thread.setdefault(threads[i], []).append((i, hier))
    resolved: dict[str, tuple[list[str], bool]] = {}
    unresolved: dict[str, str] = {}
    spans: list[LayerCall] = []
    for root in _root_calls(tables):
        ops = by_thread.get(root.thread, [])
        lo = bisect.bisect_left(ops, root.start, key=lambda t: starts[t[0]])
        open_: list[list[Any]] = []  # [path, start, end]
        outer_end = -1
        for i, hier in ops[lo:]:
            start, end = starts[i], ends[i]
            if start >= root.end:
                break
            if start < outer_end or end > root.end:
                continue  # nested in the op before it, which placed it
            outer_end = end
            if hier not in resolved:
                resolved[hier] = graph.resolve(hierarchy_segments(hier))
            paths, ok = resolved[hier]
            if not ok:
                unresolved.setdefault(paths[-1] if paths else "", hier)
            keep = 0
            while keep < min(len(open_), len(paths)) and open_[keep][0] == paths[keep]:
                keep += 1
            while len(open_) > keep:
                path, s, e = open_.pop()
                spans.append(LayerCall(path, root.thread, s, e, root.iteration))
            open_ += [[p, start, end] for p in paths[keep:]]
            for frame in open_:
                frame[2] = max(frame[2], end)
        while open_:
            path, s, e = open_.pop()
            spans.append(LayerCall(path, root.thread, s, e, root.iteration))
    return spans, unresolved


@dataclass
class Verdict:
    """Which layers' rows the TorchScript code confirms.

    ``trusted``: layers whose calls per forward match what their caller's code
    makes; ``empty``: trusted layers that ran no operator (an ``Identity``),
    with their zero-time calls per iteration; ``dropped``: layer -> why its
    rows (and its sub-layers') are left out; ``below``: layers whose
    sub-layers are all left out, and why.
    """

    trusted: set[str]
    empty: dict[str, list[int]]
    dropped: dict[str, str]
    below: dict[str, str]

    def drops(self, path: str) -> bool:
        """Is ``path`` left out (dropped itself, or under a dropped or ``below`` layer)?"""
        return any(path == d or _inside(path, d) for d in self.dropped) or any(
            _inside(path, b) for b in self.below
        )

    def notes(self, module: Any) -> tuple[Note, ...]:
        """One line on the method, then one per reason layers were left out."""
        root = str(getattr(module, "original_name", type(module).__name__))
        if sum(1 for _ in module.named_modules()) == 1:
            text = (
                f"torchscript: no per-layer rows: {root} has no sub-modules left (frozen or"
                " optimized for inference: torch.jit.freeze inlines them into its graph),"
                " so all its time is its own self time"
            )
            return (Note("torchscript-no-submodules", text, {"root": root}),)
        method = (
            "torchscript: layer times come from the module hierarchy the profiler records"
            " per operator (a call spans its first to its last operator); each layer's"
            " calls are checked against the TorchScript code that calls it"
        )
        out = [Note("torchscript-method", method)]
        by_reason: dict[str, list[str]] = {}
        for path, why in self.dropped.items():
            if not any(_inside(path, d) for d in self.dropped):
                by_reason.setdefault(why, []).append(path or root)
        for why, paths in by_reason.items():
            names = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
            text = (
                f"torchscript: no rows for {names} (or their sub-layers): {why};"
                " their time is in the calling layer's self time"
            )
            out.append(Note("torchscript-no-rows", text, {"paths": tuple(paths), "why": why}))
        for path, why in self.below.items():
            text = (
                f"torchscript: no rows below {path or root}: {why};"
                f" their time is in {path or root}'s self time"
            )
            out.append(Note("torchscript-no-rows-below", text, {"path": path, "why": why}))
        return tuple(out)


def judge(
    graph: _CallGraph, spans: Sequence[LayerCall], unresolved: dict[str, str], iterations: int
) -> Verdict:
    """Walk the call graph from the root: a callee is trusted when its caller is and
    its observed calls per iteration fit the count its caller's code makes."""
    seen: dict[str, list[int]] = {"": [1] * iterations}
    for s in spans:
        seen.setdefault(s.path, [0] * iterations)[s.iteration] += 1
    verdict = Verdict(trusted={""}, empty={}, dropped=dict(graph.suspect), below={})
    queue = [""]
    while queue:
        caller = queue.pop(0)
        if caller in unresolved:
            verdict.below[caller] = (
                "its operators name sub-modules that its TorchScript code does not call"
            )
            continue
        calls = seen.get(caller, [0] * iterations)
        for callee, site in graph.callees(caller).items():
            if callee in verdict.trusted or callee in verdict.dropped:
                continue
            counts = seen.get(callee, [0] * iterations)
            why = graph.flawed.get(callee) or _count_flaw(site, counts, calls)
            if (
                why is not None
                and not any(counts)
                and site.low == site.high
                and callee not in graph.flawed
            ):
                # ran no operator at all (an Identity): called, in no time
                counts = verdict.empty[callee] = seen[callee] = [site.low * c for c in calls]
                why = None
            if why is None:
                verdict.trusted.add(callee)
                queue.append(callee)
            else:
                verdict.dropped[callee] = why
    return verdict


_INTERLEAVED = (
    "the order of their operators does not give the calls their TorchScript code makes"
    " (operators of several calls interleave, or calls run back to back)"
)
_REPEATED = (
    "their code may call them several times in a row (a loop, or branches), and calls"
    " with no operator between them cannot be told apart"
)


def _count_flaw(site: _ScriptCallSite, counts: Sequence[int], calls: Sequence[int]) -> str | None:
    """Why the observed calls per iteration cannot be trusted, or None."""
    if site.low != site.high and site.high > 1:
        return _REPEATED
    for seen, n in zip(counts, calls, strict=True):
        if not site.low * n <= seen <= site.high * n:
            return _INTERLEAVED
    return None


def _zero_time_spans(
    spans: Sequence[LayerCall],
    roots: Sequence[LayerCall],
    empty: dict[str, list[int]],
    graph: _CallGraph,
) -> list[LayerCall]:
    """Calls of layers that ran no operator: zero-length spans at the start of their
    caller's first call of each iteration."""
    caller_of = {callee: caller for caller, sites in graph.sites.items() for callee in sites}
    every = [*roots, *spans]
    first: dict[tuple[str, int], LayerCall] = {}
    for span in every:
        first.setdefault((span.path, span.iteration), span)
    added: list[LayerCall] = []
    for path, per_iteration in empty.items():  # callers before callees: judge's order
        for it, n in enumerate(per_iteration):
            caller = first.get((caller_of[path], it))
            if caller is not None and n > 0:
                zero = [LayerCall(path, caller.thread, caller.start, caller.start, it)] * n
                first.setdefault((path, it), zero[0])
                added += zero
    return added


def call_graph(module: Any) -> _CallGraph:
    """The call sites of every submodule with TorchScript code (see ``_CallGraph``)."""
    modules = dict(module.named_modules())
    types = {p: str(getattr(m, "original_name", type(m).__name__)) for p, m in modules.items()}
    sites: dict[str, dict[str, _ScriptCallSite]] = {}
    opaque: list[tuple[str, str]] = []  # (caller, type of the module it got)
    for path, sub in modules.items():
        if not _has_code(sub, "forward"):
            continue
        for chain, (low, high) in _method_counts(sub, "forward", ("forward",)).items():
            if chain[0] == _ARGUMENT:
                opaque.append((path, chain[1]))
                continue
            callee = f"{path}.{'.'.join(chain)}" if path else ".".join(chain)
            sites.setdefault(path, {})[callee] = _ScriptCallSite(callee, chain[-1], int(low), high)
    called = {callee for callees in sites.values() for callee in callees}
    # torch.jit.trace hands a module shared by two parts of the model to the second
    # part's graph as an argument: the code calls a module no call site names, so
    # any uncalled layer of its type may be it, and its 0 calls are unproven.
    suspect = {
        path: (
            f"{caller or 'the model'} calls a {type_name} module that its code gets as an"
            " argument (torch.jit.trace passes a module shared by two parts of the model"
            " so), which may be one of these"
        )
        for caller, type_name in opaque
        for path in modules
        if path and path not in called and types[path] == type_name
    }
    flawed = {
        callee: why
        for caller, callees in sites.items()
        for callee in callees
        if (why := _site_flaw(caller, callee, modules, called)) is not None
    }
    for callees in sites.values():
        twins: dict[tuple[str, str], list[str]] = {}
        for callee, site in callees.items():
            twins.setdefault((site.name, types.get(callee, "")), []).append(callee)
        for (name, type_name), group in twins.items():
            if len(group) > 1:
                why = f"the profiler names {' and '.join(group)} alike, {name}({type_name})"
                for callee in group:
                    flawed.setdefault(callee, why)
    unnamed: dict[str, set[str]] = {}
    for caller, type_name in opaque:
        unnamed.setdefault(caller, set()).add(type_name)
    return _CallGraph(types, sites, flawed, suspect, unnamed)


def _site_flaw(caller: str, callee: str, modules: dict[str, Any], called: set[str]) -> str | None:
    """A call that the module tree would show under the wrong parent."""
    if callee not in modules:
        return "they are not in named_modules() (one module shared under two paths)"
    rel = callee[len(caller) + 1 :] if caller else callee
    parts = rel.split(".")
    for k in range(1, len(parts)):
        mid = f"{caller}.{'.'.join(parts[:k])}" if caller else ".".join(parts[:k])
        if mid in called:
            return (
                f"{caller or 'the model'} calls them directly, past {mid}, which is called"
                " on its own too: the tree would put their time under the wrong parent"
            )
    return None


def _has_code(sub: Any, method: str) -> bool:
    c = getattr(sub, "_c", None)
    return c is not None and bool(c._has_method(method))


Counts = dict[tuple[str, ...], tuple[float, float]]  # attribute chain -> (low, high) calls
_ARGUMENT = "<argument>"  # first key of a module the code did not take from self


def _method_counts(sub: Any, method: str, stack: tuple[str, ...]) -> Counts:
    graph = sub._c._get_method(method).graph
    self_id = next(iter(graph.inputs())).unique()
    return _block_counts(graph.nodes(), sub, self_id, stack)


def _block_counts(nodes: Any, sub: Any, self_id: int, stack: tuple[str, ...]) -> Counts:
    """Sub-module calls of one block of nodes: sequences add up, the branches of an
    ``If`` give the least and the most of either, a ``Loop`` any number."""
    total: Counts = {}
    for node in nodes:
        kind = node.kind()
        if kind == "prim::CallMethod":
            chain = _attr_chain(node.inputsAt(0), self_id)
            name = node.s("name")
            if chain == () and name not in stack and _has_code(sub, name):
                # a method of its own: its calls count as this module's
                _add(total, _method_counts(sub, name, (*stack, name)))
            elif _FORWARD.match(name) and chain is None:
                # a module from an argument or a list: known by its type only
                kind_of = node.inputsAt(0).type()
                _add(total, {(_ARGUMENT, getattr(kind_of, "name", lambda: "?")()): (1, 1)})
            elif chain and _FORWARD.match(name):  # other methods are no layer call
                _add(total, {chain: (1, 1)})
        parts = [_block_counts(b.nodes(), sub, self_id, stack) for b in node.blocks()]
        if not parts:
            continue
        chains = {c for part in parts for c in part}
        if kind == "prim::If":
            _add(total, {c: (min(p.get(c, (0, 0))[0] for p in parts),
                             max(p.get(c, (0, 0))[1] for p in parts)) for c in chains})  # fmt: skip
        else:  # a loop (or any other block): how often it runs is not in the code
            _add(total, dict.fromkeys(chains, (0.0, math.inf)))
    return total


def _add(total: Counts, more: Counts) -> None:
    for chain, (low, high) in more.items():
        was_low, was_high = total.get(chain, (0, 0))
        total[chain] = (was_low + low, was_high + high)


def _attr_chain(value: Any, self_id: int) -> tuple[str, ...] | None:
    """``self.blocks.0`` -> ("blocks", "0"); None when the module comes from elsewhere."""
    names: list[str] = []
    while value.unique() != self_id:
        node = value.node()
        if node.kind() != "prim::GetAttr":
            return None
        names.append(node.s("name"))
        value = node.inputsAt(0)
    return tuple(reversed(names))


def _inside(path: str, root: str) -> bool:
    return path.startswith(root + ".") if root else path != ""


def _add_layer_ranges(
    trace: dict[str, Any], tables: EventTables, calls: Sequence[LayerCall]
) -> None:
    """Write the rebuilt layer calls into the trace as ``layer:`` ranges, so that the
    trace engine attributes the ops to them and exports get layer lanes.

    They go first, in the order given (outer layers first where spans coincide):
    a span starts exactly where its first op starts (the op's own ``ts`` is
    reused, so both parse to the same ns), and the engine's stable sort then
    nests the op inside the span, not the span inside the op.
    """
    events = trace.setdefault(EVENTS_KEY, [])
    # the engine's thread keys and times (its own ts conversion) -> what the trace wrote
    where = {
        (str(ev.get("pid")), str(ev.get("tid"))): (ev.get("pid"), ev.get("tid"))
        for ev in events
        if ev.get("cat") == "cpu_op"
    }
    timed = [ev for ev in events if ev.get("ph") == "X" and isinstance(ev.get("ts"), (int, float))]
    ns, _ = ts_from_us([ev["ts"] for ev in timed])
    ts_of = {
        ((str(ev.get("pid")), str(ev.get("tid"))), t): ev["ts"]
        for ev, t in zip(timed, ns.tolist(), strict=True)
    }
    origin = tables.origin_us * 1000
    added = []
    for call in calls:
        thread = tables.threads[call.thread]
        if thread not in where:
            continue
        pid, tid = where[thread]
        added.append(
            {
                "ph": "X",
                "cat": USER_ANNOTATION,
                "name": LAYER_RANGE + call.path,
                "ts": ts_of.get((thread, call.start + origin), (call.start + origin) / 1000),
                "dur": (call.end - call.start) / 1000,
                "pid": pid,
                "tid": tid,
                "args": {"synthetic": "from the Module Hierarchy of its operators"},
            }
        )
    events[:0] = added


def _script_layers(module: Any) -> tuple[LayerInfo, ...]:
    """LayerInfo per submodule of a ScriptModule (types from ``original_name``)."""
    infos = []
    for path, sub in module.named_modules():
        parent = None if path == "" else (path.rsplit(".", 1)[0] if "." in path else "")
        infos.append(
            LayerInfo(
                path=path,
                type=str(getattr(sub, "original_name", type(sub).__name__)),
                parent=parent,
                params=sum(p.numel() for p in sub.parameters()),
                params_own=sum(p.numel() for p in sub.parameters(recurse=False)),
            )
        )
    return tuple(infos)


# ---- torch.export ------------------------------------------------------------------------


def export_capture(
    program: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    *,
    iters: int,
    options: OpOptions | None = None,
) -> tuple[tuple[LayerInfo, ...], RawTrace]:
    import torch

    gm = instrumented_module(program)
    device = device_of(gm)
    cap = capture_ops(
        gm, args, kwargs, iters=iters, device=device, options=options or OpOptions(),
        grad_ctx_factory=torch.no_grad,
    )  # fmt: skip
    return _export_layers(program, gm), cap


def _module_stacks(graph: Any) -> dict[Any, list[tuple[str, str]]]:
    """node -> [(path, type)] from ``nn_module_stack``, outermost first, root left out."""
    out: dict[Any, list[tuple[str, str]]] = {}
    for node in graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if node.op == "call_function" and stack:
            out[node] = [(str(p), str(t)) for p, t in stack.values() if p]
    return out


def instrumented_module(program: Any) -> torch.fx.GraphModule:
    """``program.module()`` with ``layer:{path}`` ranges opened/closed where the module stack changes."""
    gm: torch.fx.GraphModule = program.module()
    enter, leave = range_api()
    stacks = _module_stacks(gm.graph)
    open_: list[tuple[str, Any]] = []
    for node in list(gm.graph.nodes):
        if node.op == "output":
            _close(gm, node, open_, 0, leave)
            continue
        if node not in stacks:
            continue
        paths = [p for p, _ in stacks[node]]
        keep = 0
        while keep < min(len(open_), len(paths)) and open_[keep][0] == paths[keep]:
            keep += 1
        _close(gm, node, open_, keep, leave)
        for path in paths[keep:]:
            with gm.graph.inserting_before(node):
                open_.append((path, gm.graph.call_function(enter, (LAYER_RANGE + path,))))
    gm.recompile()
    return gm


def _close(gm: Any, before: Any, open_: list[tuple[str, Any]], keep: int, leave: Any) -> None:
    while len(open_) > keep:
        _, handle = open_.pop()
        with gm.graph.inserting_before(before):
            gm.graph.call_function(leave, (handle,))


def _export_layers(program: Any, gm: Any) -> tuple[LayerInfo, ...]:
    """Layers with original paths: types from ``nn_module_stack``, parameters from the module."""
    types: dict[str, str] = {}
    for stack in _module_stacks(program.graph).values():
        for path, type_name in stack:
            types.setdefault(path, type_name.rsplit(".", 1)[-1])
    root_type = type(gm).__name__
    for node in program.graph.nodes:
        for p, t in (node.meta.get("nn_module_stack") or {}).values():
            if not p:
                root_type = str(t).rsplit(".", 1)[-1]
    modules = dict(gm.named_modules())
    # torch's own helpers (the "_guards_fn" guard check) are not the user's layers
    known = set(types) | {p for p in modules if p and not p.split(".")[-1].startswith("_")}
    paths = ["", *sorted(known, key=_module_order(types, modules))]
    infos = []
    for path in paths:
        sub = modules.get(path)
        infos.append(
            LayerInfo(
                path=path,
                type=root_type if path == "" else types.get(path, "Module"),
                parent=None if path == "" else (path.rsplit(".", 1)[0] if "." in path else ""),
                params=sum(p.numel() for p in sub.parameters()) if sub is not None else 0,
                params_own=sum(p.numel() for p in sub.parameters(recurse=False))
                if sub is not None
                else 0,
            )
        )
    return tuple(infos)


def _module_order(types: dict[str, str], modules: dict[str, Any]) -> Any:
    """First use in the graph (parents before children, parameter-free layers in
    place), then the exported module's order for layers no op ran in."""
    rank = {p: i for i, p in enumerate(modules)}
    used = {p: i for i, p in enumerate(types)}
    return lambda p: (used.get(p, len(used)), rank.get(p, len(rank)), p)
