"""The recording backend: inductor, plus a record of what each compiled graph runs.

``RecordingBackend`` is a ``torch.compile`` backend that calls inductor's
``compile_fx`` with an ``inner_compile`` of its own (no monkey-patching). For
every graph inductor compiles it keeps a :class:`GraphRecord`: the FX-graph
cache key that the ``## Call CompiledFxGraph <key> ##`` event names at run
time, Dynamo's compile id, the kernel call sites in the order the generated
wrapper calls them, and for every post-grad node those sites compute, its
module path (from ``nn_module_stack``, relative to the compiled frame's
``self``) and its cost (FLOPs for matmul/conv/attention, elements otherwise).

Where the call sites come from (see docs/compile.md): inductor's provenance
tracking (``trace.provenance_tracking_level=1``) maps every call site
``"<kernel>:<handle>"`` to post-grad node names. A forward graph carries the
map in ``CompiledFxGraph.inductor_provenance_mapping_str`` (also on an FX-cache
hit: it is pickled with the graph); a lazily compiled backward does not, so
its map is read from the provenance globals that its code generation fills,
which needs a cache miss (``force_disable_caches`` for backward graphs only).
An AOTAutograd cache hit would skip ``inner_compile`` altogether, so that
cache is off while layerprof compiles.

Origins over-approximate (a kernel lists the producers it recomputes, an
extern op its inputs' views), so each node is credited once: an extern call
site to its own op's node, a generated kernel to the nodes no earlier site
took.
"""

from __future__ import annotations

import json
import operator
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from layerprof.trace.graphrecord import (
    GraphRecord,
    KernelSite,
    NodeInfo,
    common_ancestor,
    is_compute_op,
)

__all__ = ["RecordingBackend", "event_name", "module_path"]

_ROOT = re.compile(r"^[LG]\[(['\"])(?P<name>.+?)\1\]")
_INDEX = re.compile(
    r"\._modules\[(['\"])(?P<a>[^'\"]+)\1\]|\[(['\"])(?P<b>[^'\"]+)\3\]|\[(?P<i>\d+)\]"
)
_PATH = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")
_TORCH_OP = re.compile(r"^torch\.ops\.(?P<ns>\w+)\.(?P<op>\w+)(\.\w+)?$")
_ATEN_OP = re.compile(r"^aten\.(?P<op>\w+)(\.\w+)?$")
_SHAPE_FALLBACK = 1  # a symbolic size without a hint counts as 1 (costs are only compared)


# Ops that do a layer's heavy work (matmul, convolution, attention), by the op part of
# their name: ``aten::addmm``, ``mkldnn::_convolution_pointwise``, ``mkl::_mkl_linear``,
# ``aten::_scaled_dot_product_flash_attention_for_cpu`` (not ``upsample_bilinear2d``).
@dataclass
class RecordingBackend:
    """A ``torch.compile`` backend: inductor with ``config_patches``, recording each graph.

    One instance serves every compile with the same options in a process, so
    that Dynamo reuses what it compiled for it before (its cache entries are
    per backend) and the records of those graphs are still here.
    """

    config_patches: dict[str, Any]
    records: list[GraphRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, gm: Any, example_inputs: Sequence[Any]) -> Any:
        import torch._functorch.config as functorch_config
        from torch._inductor.compile_fx import compile_fx

        # An AOTAutograd cache hit returns the compiled graph without calling
        # inner_compile: nothing would be recorded.
        with functorch_config.patch(enable_autograd_cache=False):
            return compile_fx(
                gm, example_inputs, inner_compile=self._inner, config_patches=self.config_patches
            )

    def _inner(self, gm: Any, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        import torch._inductor.config as inductor_config
        import torch._inductor.debug as inductor_debug
        from torch._inductor.compile_fx import compile_fx_inner

        backward = bool(kwargs.get("is_backward"))
        before = dict(inductor_debug._inductor_triton_kernel_to_post_grad_node_info)
        start = time.perf_counter_ns()
        if backward:
            # A lazily compiled backward has no provenance string; its map is only
            # filled by code generation, which an FX-cache hit skips.
            with inductor_config.patch(force_disable_caches=True):
                out = compile_fx_inner(gm, example_inputs, **kwargs)
        else:
            out = compile_fx_inner(gm, example_inputs, **kwargs)
        elapsed = time.perf_counter_ns() - start
        after = inductor_debug._inductor_triton_kernel_to_post_grad_node_info
        added = {k: v for k, v in after.items() if before.get(k) != v}
        sites = provenance_sites(getattr(out, "inductor_provenance_mapping_str", None), added)
        record = build_record(
            gm,
            sites,
            key=getattr(out, "_fx_graph_cache_key", None),
            compile_id=_compile_id(),
            phase="backward" if backward else "forward",
            compile_ns=elapsed,
        )
        with self._lock:
            self.records.append(record)
        return out


def _compile_id() -> str:
    from torch._guards import CompileContext

    found = CompileContext.current_compile_id()
    return str(found) if found is not None else "?"


def provenance_sites(
    mapping: str | None, fallback: Mapping[str, Sequence[str]]
) -> list[tuple[str, list[str]]]:
    """``(kernel, node names)`` per call site, in the wrapper's call order (by handle)."""
    table: Mapping[str, Any] = {}
    if mapping:
        try:
            decoded = json.loads(mapping)
        except ValueError:
            decoded = {}
        if isinstance(decoded, dict) and isinstance(decoded.get("cppCodeToPost"), dict):
            table = decoded["cppCodeToPost"]
    if not table:
        table = fallback
    sites: list[tuple[int, str, list[str]]] = []
    for site, nodes in table.items():
        kernel, _, handle = str(site).rpartition(":")
        if not kernel or not handle.isdigit():
            continue
        names = [str(n) for n in nodes] if isinstance(nodes, (list, tuple)) else []
        sites.append((int(handle), kernel, names))
    sites.sort(key=operator.itemgetter(0))
    return [(kernel, names) for _, kernel, names in sites]


def event_name(kernel: str) -> tuple[str, bool]:
    """(the profiler's name for a call site's kernel, whether it is an extern op)."""
    if kernel.startswith("extern_kernels."):
        return "aten::" + kernel[len("extern_kernels.") :], True
    found = _TORCH_OP.match(kernel)
    if found:
        return f"{found['ns']}::{found['op']}", True
    found = _ATEN_OP.match(kernel)
    if found:
        return f"aten::{found['op']}", True
    return kernel, False


def build_record(
    gm: Any,
    sites: Iterable[tuple[str, list[str]]],
    *,
    key: str | None,
    compile_id: str,
    phase: str,
    compile_ns: int = 0,
) -> GraphRecord:
    """The record of one compiled graph: call sites with their credited nodes."""
    graph_nodes = {n.name: n for n in gm.graph.nodes}
    listed = []
    for kernel, names in sites:
        event, extern = event_name(kernel)
        known = [n for n in dict.fromkeys(names) if n in graph_nodes]
        own = [n for n in known if _op_name(graph_nodes[n]) == event] if extern else []
        listed.append((kernel, event, extern, known, own))
    # Extern ops first: their own node is theirs, wherever a fused kernel lists it too
    # (an epilogue lists the matmul or convolution whose output it reads).
    externs = {n for *_, own in listed for n in own}
    credited = set(externs)
    out_sites: list[KernelSite] = []
    infos: dict[str, NodeInfo] = {}
    for kernel, event, extern, known, own in listed:
        operands: list[str] = []
        if extern:
            chosen = own or known
        else:
            chosen = [n for n in known if n not in credited] or known
            credited.update(chosen)
            operands = [
                n for n in known
                if n in externs and n not in chosen and is_compute_op(_op_name(graph_nodes[n]))
            ]  # fmt: skip
        for name in (*chosen, *operands):
            if name not in infos:
                infos[name] = node_info(graph_nodes[name], backward=phase == "backward")
        out_sites.append(
            KernelSite(
                kernel=kernel,
                event=event,
                extern=extern,
                nodes=tuple(chosen),
                operands=tuple(operands),
            )
        )
    return GraphRecord(
        key=key,
        compile_id=compile_id,
        phase=phase,
        sites=tuple(out_sites),
        nodes=infos,
        compile_ns=compile_ns,
    )


def node_info(node: Any, *, backward: bool = False) -> NodeInfo:
    """A node's module path and cost. A node a pattern pass created (inductor writes
    out attention as SDPA) has no module stack: it takes the common module of its
    neighbours in the graph (``inferred``)."""
    found = _stack_path(node, backward)
    path: str | None = ""
    type_name: str | None = None
    inferred = False
    if found is not None:
        path, type_name = found
    elif _pattern_made(node):
        near = _neighbour_paths(node, backward)
        if near:
            path, inferred = common_ancestor(near), True
    return NodeInfo(
        name=node.name,
        path=path,
        type=type_name,
        op=_op_name(node),
        cost=_node_cost(node),
        inferred=inferred,
        stackless=found is None and not inferred,
        operand_cost=float(sum(_elements(a.meta.get("val")) for a in node.all_input_nodes)),
    )


def _stack_path(node: Any, backward: bool) -> tuple[str | None, str | None] | None:
    """(path, module class) from the node's module stack; None without a stack."""
    meta = node.meta
    stack = (meta.get("fwd_nn_module_stack") if backward else None) or meta.get("nn_module_stack")
    if not stack:
        return None
    fqn, cls = list(stack.values())[-1]
    type_name = getattr(cls, "__name__", None) or str(cls).rsplit(".", 1)[-1].strip("'>")
    return module_path(str(fqn)), type_name


def _pattern_made(node: Any) -> bool:
    """Whether a pattern pass made the node (its provenance says it replaced others)."""
    sources = list(node.meta.get("from_node") or ())
    while sources:
        source = sources.pop()
        action = str(getattr(source, "action", ""))
        if "pattern" in str(getattr(source, "pass_name", "")) or "replace" in action.lower():
            return True
        sources.extend(getattr(source, "from_node", None) or ())
    return False


def _neighbour_paths(node: Any, backward: bool, hops: int = 4) -> list[str]:
    """Module paths of the nearest nodes with a module stack, inputs and users alike."""
    seen = {node}
    frontier = [*node.all_input_nodes, *node.users]
    for _ in range(hops):
        paths: list[str] = []
        after: list[Any] = []
        for n in frontier:
            if n in seen or n.op != "call_function":
                continue
            seen.add(n)
            found = _stack_path(n, backward)
            if found is None:
                after += [*n.all_input_nodes, *n.users]
            elif found[0] is not None:
                paths.append(found[0])
        if paths:
            return paths
        frontier = after
    return []


def module_path(fqn: str) -> str | None:
    """``L['self'].blocks.0.attn`` / ``L['self']._modules['blocks'][0]`` -> ``blocks.0.attn``.

    Relative to the frame's local the stack starts from; None for anything
    that is not a plain attribute path under a frame local (a global module).
    """
    found = _ROOT.match(fqn)
    if found is None or fqn.startswith("G["):
        return None
    rest = fqn[found.end() :].removeprefix(".__self__")  # a bound method's module
    rest = _INDEX.sub(lambda m: "." + (m.group("a") or m.group("b") or m.group("i")), rest)
    rest = rest.removeprefix(".")
    if rest == "":
        return ""
    return rest if _PATH.match(rest) else None


def _op_name(node: Any) -> str:
    """``aten::addmm`` for an aten node; the target's name otherwise."""
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        return str(schema.name)
    return getattr(node.target, "__name__", str(node.target))


def _node_cost(node: Any) -> float:
    """FLOPs of a matmul/conv/attention node, elements of the output otherwise; views 0."""
    if node.op != "call_function" or node.target is operator.getitem:
        return 0.0
    if getattr(node.target, "is_view", False):
        return 0.0
    flops = _flops(node)
    if flops is not None:
        return float(flops)
    return float(_elements(node.meta.get("val")))


def _flops(node: Any) -> int | None:
    from torch.utils._pytree import tree_map
    from torch.utils.flop_counter import flop_registry

    packet = getattr(node.target, "overloadpacket", None)
    formula = flop_registry.get(packet) if packet is not None else None
    if formula is None:
        return None

    def value(arg: Any) -> Any:
        val = arg.meta.get("val") if hasattr(arg, "meta") else arg
        return _shape(val) if hasattr(val, "shape") else val

    try:
        args = tree_map(value, tuple(node.args))
        kwargs = tree_map(value, dict(node.kwargs))
        out = tree_map(lambda v: _shape(v) if hasattr(v, "shape") else v, node.meta.get("val"))
        return int(formula(*args, out_val=out, **kwargs))
    except Exception:  # a formula this node's arguments do not fit: count elements
        return None


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(_concrete(d) for d in value.shape)


def _concrete(dim: Any) -> int:
    if isinstance(dim, int):
        return dim
    hint = getattr(getattr(dim, "node", None), "hint", None)
    return int(hint) if isinstance(hint, int) else _SHAPE_FALLBACK


def _elements(value: Any) -> int:
    if hasattr(value, "shape"):
        total = 1
        for d in _shape(value):
            total *= d
        return total
    if isinstance(value, (list, tuple)):
        return sum(_elements(v) for v in value)
    return 0


def make_backend(mode: str | None, dynamic: bool | None) -> RecordingBackend:
    """The process's backend for these options (created on first use)."""
    key = f"{mode or 'default'}|{dynamic}"
    with _BACKENDS_LOCK:
        backend = _BACKENDS.get(key)
        if backend is None:
            backend = _BACKENDS[key] = RecordingBackend(config_patches=_patches(mode, dynamic))
    return backend


def _patches(mode: str | None, dynamic: bool | None) -> dict[str, Any]:
    from torch._inductor import list_mode_options

    options: dict[str, Any] = dict(list_mode_options(mode, dynamic)) if mode else {}
    # Provenance: kernel call site -> post-grad nodes. Kernel profile: every
    # generated C++ kernel is a profiler event (Triton launches always are).
    options["trace.provenance_tracking_level"] = 1
    options["cpp.enable_kernel_profile"] = True
    return options


_BACKENDS: dict[str, RecordingBackend] = {}
_BACKENDS_LOCK = threading.Lock()
