"""Per-layer rows for models whose forward hooks never fire: TorchScript and torch.export.

TorchScript: the profiler's ``with_modules=True`` tags every op with its
``Module Hierarchy`` (``TOP(Net)::forward.features(Sequential)::forward.0(Block)
::forward.conv(Conv2d)::forward.SELF(Conv2d)::_conv_forward.``). Each
iteration runs inside a root ``layer:`` range; inside it, consecutive
top-level ops of the same module path form one call of that layer, from its
first op's start to its last op's end. Time between ops of one layer is the
layer's self time; time between layers (interpreter dispatch) is their common
ancestor's. Two back-to-back calls of one module with no op between them
merge into one call.

torch.export: graph nodes carry ``nn_module_stack`` metadata (original
qualified paths, outermost first). A graph pass over ``program.module()``
inserts ``layer:{path}`` range enter/exit calls where the stack changes, so
the flat, compiled graph runs as exported (``torch.export.unflatten`` would
run the graph through the slower fx interpreter) and the ops-mode
attribution applies unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from layerprof.device import device_of
from layerprof.errors import ModelRunError
from layerprof.opcapture import (
    LAYER_PREFIX,
    HostEvent,
    OpCapture,
    OpOptions,
    attribute,
    capture_ops,
    range_api,
    trace_loader,
)
from layerprof.quiet import kineto_quiet
from layerprof.records import LayerInfo, LayerSamples, OpStat

if TYPE_CHECKING:
    import torch

LayerProfile = tuple[tuple[LayerInfo, ...], dict[str, LayerSamples], tuple[OpStat, ...]]
_SEGMENT = re.compile(r"^(?P<name>[^(]*)\((?P<type>[^)]*)\)::")


# ---- TorchScript -----------------------------------------------------------------------


def script_layer_profile(
    scripted_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, *, iters: int
) -> LayerProfile:
    """(layers, samples, ops) of a ``torch.jit.ScriptModule`` from the module hierarchy."""
    layers, cap = script_capture(scripted_module, args, kwargs, iters=iters)
    return layers, cap.layer_samples(), cap.ops


def script_capture(
    scripted_module: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    *,
    iters: int,
    options: OpOptions | None = None,
) -> tuple[tuple[LayerInfo, ...], OpCapture]:
    import torch

    from layerprof.opcapture import TraceCycle, profiler_kwargs
    from layerprof.runner import model_error

    kw = profiler_kwargs(options or OpOptions(), device_of(scripted_module), iters)
    kw["with_modules"] = True
    enter, leave = range_api()
    with kineto_quiet(), torch.no_grad(), torch.profiler.profile(**kw) as prof:
        for _ in range(iters):
            handle = enter(LAYER_PREFIX)
            try:
                scripted_module(*args, **(kwargs or {}))
            except (KeyboardInterrupt, ModelRunError):
                raise
            except Exception as exc:
                # TorchScript raises from inside the graph: no layer can be named.
                raise model_error(scripted_module, None, exc) from exc
            finally:
                leave(handle)
            prof.step()
    results = prof.profiler.kineto_results
    trace = trace_loader(results)()
    host = hierarchy_events(trace.get("traceEvents") or [])
    _add_layer_ranges(trace, host)
    records, calls, n = attribute(host, None)
    cycle = TraceCycle(lambda: trace, trace)
    cap = OpCapture(tuple(records), tuple(calls), max(n, 1), "cpu", cycles=(cycle,))
    return script_layers(scripted_module), cap


def _add_layer_ranges(trace: dict[str, Any], host: Sequence[HostEvent]) -> None:
    """Write the synthetic per-module spans into the trace as ``layer:`` ranges, so
    exported traces get layer lanes for TorchScript models too."""
    events = trace.setdefault("traceEvents", [])
    present = {
        (str(ev.get("name")), round(float(ev.get("ts", 0)) * 1000))
        for ev in events
        if str(ev.get("name", "")).startswith(LAYER_PREFIX)
    }
    where = {_tid(ev): (ev.get("pid"), ev.get("tid")) for ev in events if ev.get("cat") == "cpu_op"}
    for e in host:
        if (
            not e.name.startswith(LAYER_PREFIX)
            or (e.name, e.start) in present
            or e.tid not in where
        ):
            continue
        pid, tid = where[e.tid]
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": e.name,
                "ts": e.start / 1000,
                "dur": (e.end - e.start) / 1000,
                "pid": pid,
                "tid": tid,
                "args": {"synthetic": "from the Module Hierarchy of its operators"},
            }
        )


def hierarchy_path(hierarchy: str) -> list[tuple[str, str]]:
    """``TOP(Net)::forward.a(Seq)::forward.0(Conv)::forward.`` -> [("a", "Seq"), ("a.0", "Conv")]."""
    out: list[tuple[str, str]] = []
    path = ""
    for segment in hierarchy.split("."):
        m = _SEGMENT.match(segment)
        if m is None or m["name"] in ("TOP", "SELF"):
            continue
        path = f"{path}.{m['name']}" if path else m["name"]
        out.append((path, m["type"]))
    return out


def hierarchy_events(events: Sequence[dict[str, Any]]) -> list[HostEvent]:
    """Ops of a ``with_modules`` trace plus synthetic ``layer:`` spans from their hierarchy."""
    ops: list[HostEvent] = []
    tagged: list[tuple[HostEvent, list[str]]] = []
    for ev in events:
        if ev.get("ph") != "X" or ev.get("cat") not in ("cpu_op", "user_annotation"):
            continue
        start = round(float(ev["ts"]) * 1000)
        e = HostEvent(str(ev["name"]), _tid(ev), start, start + round(float(ev["dur"]) * 1000))
        if e.name == "forward":
            continue  # TorchScript's own method-call record, not an op
        ops.append(e)
        hier = (ev.get("args") or {}).get("Module Hierarchy")
        if hier and not e.name.startswith(LAYER_PREFIX):
            tagged.append((e, [p for p, _ in hierarchy_path(hier)]))
    return ops + layer_spans(tagged)


def layer_spans(tagged: Sequence[tuple[HostEvent, list[str]]]) -> list[HostEvent]:
    """Group top-level ops by module path into one span per layer call."""
    spans: list[HostEvent] = []
    ordered = sorted(tagged, key=lambda t: (t[0].tid, t[0].start, -t[0].end))
    open_: list[list[Any]] = []  # [path, start, end, tid]
    outer_end = -1
    for e, paths in ordered:
        if e.start < outer_end:
            continue  # nested op: its parent op already placed it
        outer_end = e.end
        keep = 0
        while (
            keep < min(len(open_), len(paths))
            and open_[keep][0] == paths[keep]
            and open_[keep][3] == e.tid
        ):
            keep += 1
        while len(open_) > keep:
            path, s, end, tid = open_.pop()
            spans.append(HostEvent(LAYER_PREFIX + path, tid, s, end))
        for path in paths[keep:]:
            open_.append([path, e.start, e.end, e.tid])
        for frame in open_:
            frame[2] = max(frame[2], e.end)
    while open_:
        path, s, end, tid = open_.pop()
        spans.append(HostEvent(LAYER_PREFIX + path, tid, s, end))
    return spans


def script_layers(module: Any) -> tuple[LayerInfo, ...]:
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


def _tid(ev: dict[str, Any]) -> int:
    tid = ev.get("tid", 0)
    return tid if isinstance(tid, int) else hash(tid)


# ---- torch.export ------------------------------------------------------------------------


def export_layer_profile(
    program: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, *, iters: int
) -> LayerProfile:
    """(layers, samples, ops) of a ``torch.export.ExportedProgram``, original paths."""
    layers, cap = export_capture(program, args, kwargs, iters=iters)
    return layers, cap.layer_samples(), cap.ops


def export_capture(
    program: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    *,
    iters: int,
    options: OpOptions | None = None,
) -> tuple[tuple[LayerInfo, ...], OpCapture]:
    import torch

    gm = instrumented_module(program)
    device = device_of(gm)
    cap = capture_ops(
        gm, args, kwargs, iters=iters, device=device, options=options or OpOptions(),
        grad_ctx_factory=torch.no_grad,
    )  # fmt: skip
    return export_layers(program, gm), cap


def module_stacks(graph: Any) -> dict[Any, list[tuple[str, str]]]:
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
    stacks = module_stacks(gm.graph)
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
                open_.append((path, gm.graph.call_function(enter, (LAYER_PREFIX + path,))))
    gm.recompile()
    return gm


def _close(gm: Any, before: Any, open_: list[tuple[str, Any]], keep: int, leave: Any) -> None:
    while len(open_) > keep:
        _, handle = open_.pop()
        with gm.graph.inserting_before(before):
            gm.graph.call_function(leave, (handle,))


def export_layers(program: Any, gm: Any) -> tuple[LayerInfo, ...]:
    """Layers with original paths: types from ``nn_module_stack``, parameters from the module."""
    types: dict[str, str] = {}
    for stack in module_stacks(program.graph).values():
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
