"""What a compiled forward records, written by hand: the graph record the recording
backend keeps and the Kineto events of one forward (CPU kernels, no compiling)."""

from __future__ import annotations

from typing import Any

from layerprof.trace.compiled import CALL_PREFIX, FORWARD_MARK, ModelPaths
from layerprof.trace.graphrecord import GraphRecord, KernelSite, NodeInfo
from layerprof.trace.kineto import tables_from_documents
from layerprof.traceformat import LAYER_RANGE

TYPES = {
    "": "Net",
    "ln": "LayerNorm",
    "fc": "Linear",
    "act": "GELU",
    "blocks": "ModuleList",
    "blocks.0": "Block",
    "blocks.0.fc": "Linear",
    "blocks.1": "Block",
    "blocks.1.fc": "Linear",
}


PATHS = ModelPaths(TYPES)


def span(
    name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1, **args: Any
) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def node(name: str, path: str | None, type_: str | None, op: str, cost: float) -> NodeInfo:
    return NodeInfo(name=name, path=path, type=type_, op=op, cost=cost)


def record(key: str | None = "k1", phase: str = "forward", compile_id: str = "0/0") -> GraphRecord:
    """ln + fc fused with gelu's input? No: the three kernels a pre-norm MLP gets."""
    nodes = {
        "var_mean": node("var_mean", "ln", "LayerNorm", "aten::var_mean", 300.0),
        "add": node("add", "", None, "aten::add", 100.0),
        "addmm": node("addmm", "fc", "Linear", "aten::addmm", 10_000.0),
        "gelu": node("gelu", "act", "GELU", "aten::gelu", 400.0),
        "view": node("view", "fc", "Linear", "aten::view", 0.0),
    }
    sites = (
        KernelSite("cpp_fused_add_native_layer_norm_0", "cpp_fused_add_native_layer_norm_0",
                 False, ("var_mean", "add")),
        KernelSite("extern_kernels.addmm", "aten::addmm", True, ("addmm",)),
        KernelSite("cpp_fused_gelu_view_1", "cpp_fused_gelu_view_1", False, ("gelu", "view")),
    )  # fmt: skip
    return GraphRecord(key=key, compile_id=compile_id, phase=phase, sites=sites, nodes=nodes)


def cpu_forward(
    t0: float, key: str = "k1", extra: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """One forward of 100 µs: 10 µs outside, 5 µs cache lookup, an 80 µs region."""
    return [
        span(FORWARD_MARK, t0, 100),
        span(LAYER_RANGE, t0 + 2, 96),
        span("TorchDynamo Cache Lookup", t0 + 5, 5),
        span("Torch-Compiled Region: 0/0", t0 + 10, 80),
        span(f"{CALL_PREFIX}{key} ##", t0 + 15, 70),
        span("graph_0_cpp_fused_add_native_layer_norm_0", t0 + 16, 10),
        span("aten::empty", t0 + 27, 1),
        span("aten::addmm", t0 + 30, 30),
        span("aten::copy_", t0 + 31, 5),  # inside addmm: part of it
        span("graph_0_cpp_fused_gelu_view_1", t0 + 62, 20),
        *(extra or []),
    ]


def tables(events: list[dict[str, Any]]) -> Any:
    return tables_from_documents([{"traceEvents": events}])
