"""The compiled attribution on traces written by hand: CPU and CUDA, no compiling.

Each trace is a Kineto Chrome trace of what a compiled forward records: a
``layerprof: compiled forward`` window, ``layer:`` ranges where modules run
eagerly, ``Torch-Compiled Region`` > ``## Call CompiledFxGraph <key> ##`` >
kernel events (on CUDA: launches whose GPU kernels carry the correlation id).
Graph records stand in for what the recording backend keeps.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layerprof.capture.compiled.backend import event_name, module_path, provenance_sites
from layerprof.capture.compiled.samples import (
    backward_problem,
    bucket_infos,
    build_section,
    coverage,
    layer_samples,
    notes,
)
from layerprof.pivot.records import OUTSIDE_ROW, OVERHEAD_ROW, LayerInfo
from layerprof.trace.compiled import (
    BACKWARD_MARK,
    CALL_PREFIX,
    FORWARD_MARK,
    ModelPaths,
    align,
    attribute_compiled,
    kernel_event,
    split_time,
)
from layerprof.trace.graphrecord import GraphRecord, KernelSite, NodeInfo, common_ancestor
from layerprof.traceformat import LAYER_RANGE
from tests.support.compiled_events import PATHS, TYPES, cpu_forward, node, record, span, tables


def test_cpu_forward_is_split_into_paths_and_buckets() -> None:
    events = cpu_forward(1000) + cpu_forward(2000)
    att = attribute_compiled(tables(events), [record()], PATHS)
    assert att.iterations() == 2
    w = att.windows["forward"][0]
    # the fused LayerNorm kernel holds the root's add too: 10 µs split 3:1 by cost
    assert dict(w.paths) == {"ln": 7_500, "": 2_500, "fc": 30_000, "act": 20_000}
    assert w.kernel_ns == 60_000 and w.shared_ns == 10_000
    assert w.region_ns == 80_000 and w.lookup_ns == 5_000
    assert w.overhead_ns == 25_000 and w.outside_ns == 15_000
    assert not att.unmatched and att.unresolved_nodes == 0
    # the gelu kernel lists fc's view: a view computes nothing, so gelu is exact
    assert att.exact[("forward", "act")] == 40_000
    assert att.estimated[("forward", "ln")] == 15_000


def test_an_overrunning_span_is_detached_not_a_parent() -> None:
    """One nesting rule (trace/nesting.py): a range that starts in the LayerNorm kernel
    and ends 5 µs after the call (an asynchronous range) is kept on its own track. It
    is no parent of the call's later kernels, so the call keeps them (a rule that
    closed the call at the overrun instead lost the addmm and gelu kernels)."""
    overrun = span("async_range", 1020, 70)
    att = attribute_compiled(tables(cpu_forward(1000, extra=[overrun])), [record()], PATHS)
    w = att.windows["forward"][0]
    assert dict(w.paths) == {"ln": 7_500, "": 2_500, "fc": 30_000, "act": 20_000}
    assert w.unmatched_ns == 0 and not att.unmatched


def test_split_rules() -> None:
    events = cpu_forward(1000)
    lca = attribute_compiled(tables(events), [record()], PATHS, rule="lca").windows["forward"][0]
    assert lca.paths[""] == 10_000 and "ln" not in lca.paths
    equal = attribute_compiled(tables(events), [record()], PATHS, rule="equal").windows["forward"][
        0
    ]
    assert equal.paths[""] == 5_000 and equal.paths["ln"] == 5_000


# A conv block: issue 22 (a fused kernel's convolution time must not go to a BatchNorm).
CONV_PATHS = ModelPaths(
    {"": "Net", "block": "Sequential", "block.0": "Conv2d", "block.1": "BatchNorm2d",
     "block.2": "ReLU", "conv": "Conv2d"}
)  # fmt: skip
BN = node("bn", "block.1", "BatchNorm2d", "aten::_native_batch_norm_legit_no_training", 4096.0)
RELU = node("relu", "block.2", "ReLU", "aten::relu", 4096.0)


def one_kernel(name: str, dur: float = 30) -> list[dict[str, Any]]:
    return [span(FORWARD_MARK, 0, 100), span("Torch-Compiled Region: 0/0", 5, 80),
            span(f"{CALL_PREFIX}c ##", 10, 70), span(name, 20, dur)]  # fmt: skip


@pytest.mark.parametrize(("rule", "to"), [("cost", "block.0"), ("equal", "block.0"),
                                          ("lca", "block")])  # fmt: skip
def test_a_kernel_that_runs_a_convolution_belongs_to_it(rule: str, to: str) -> None:
    """conv + bn + relu in one kernel (an mkldnn conv op, whose FLOPs no formula counts,
    so its cost is its elements like the BatchNorm's): the BatchNorm and the ReLU are
    the conv's epilogue, not two thirds of its time."""
    conv = node("conv", "block.0", "Conv2d", "mkldnn::_convolution_pointwise", 4096.0)
    rec = GraphRecord(
        key="c", compile_id="0/0", phase="forward",
        sites=(KernelSite("cpp_fused_conv_bn_relu_0", "cpp_fused_conv_bn_relu_0", False,
                        ("conv", "bn", "relu")),),
        nodes={"conv": conv, "bn": BN, "relu": RELU},
    )  # fmt: skip
    att = attribute_compiled(tables(one_kernel("graph_0_cpp_fused_conv_bn_relu_0")), [rec], CONV_PATHS,
                    rule=rule)  # fmt: skip
    assert dict(att.windows["forward"][0].paths) == {to: 30_000}
    assert att.estimated[("forward", to)] == 30_000  # several layers' work: an estimate


def test_a_kernel_that_lays_out_a_convolutions_weight_weighs_it_by_its_operands() -> None:
    """The previous layer's BatchNorm + ReLU fused with the next convolution's weight
    reordering (what inductor generates on CPU): the conv runs as an extern op, and the
    kernel's time is split by elements, the conv's being its operands' (weight + input)."""
    conv = NodeInfo("conv", "conv", "Conv2d", "aten::convolution", 1e9, operand_cost=8192.0)
    rec = GraphRecord(
        key="c", compile_id="0/0", phase="forward",
        sites=(KernelSite("cpp_fused_bn_convolution_relu_0", "cpp_fused_bn_convolution_relu_0",
                        False, ("bn", "relu"), operands=("conv",)),
               KernelSite("extern_kernels.convolution", "aten::convolution", True, ("conv",))),
        nodes={"conv": conv, "bn": BN, "relu": RELU},
    )  # fmt: skip
    events = [
        *one_kernel("graph_0_cpp_fused_bn_convolution_relu_0", 32),
        span("aten::convolution", 60, 10),
    ]
    w = attribute_compiled(tables(events), [rec], CONV_PATHS).windows["forward"][0]
    assert dict(w.paths) == {"conv": 16_000 + 10_000, "block.1": 8_000, "block.2": 8_000}


def test_an_extern_convolution_a_generated_kernel_lists_is_its_operand() -> None:
    """build_record on a real graph: the kernel before the conv lists the conv node
    (its weight's new layout); the conv's own extern site keeps the node, the kernel
    keeps it as an operand, with the elements of the conv's inputs."""
    import torch
    import torch.nn.functional as F
    from torch.fx.experimental.proxy_tensor import make_fx

    from layerprof.capture.compiled.backend import build_record

    def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(torch.relu(x), w)

    gm = make_fx(block, tracing_mode="fake")(torch.randn(1, 4, 6, 6), torch.randn(16, 4, 3, 3))
    names = {str(n.target).split(".")[1]: n.name for n in gm.graph.nodes
             if n.op == "call_function"}  # fmt: skip
    relu, conv = names["relu"], names["convolution"]
    rec = build_record(
        gm,
        [("cpp_fused_convolution_relu_0", [relu, conv]), ("extern_kernels.convolution", [conv])],
        key="k", compile_id="0/0", phase="forward",
    )  # fmt: skip
    fused, extern = rec.sites
    assert fused.nodes == (relu,) and fused.operands == (conv,)
    assert extern.nodes == (conv,) and not extern.operands
    assert rec.nodes[conv].operand_cost == 4 * 6 * 6 + 16 * 4 * 3 * 3
    assert rec.nodes[conv].compute and not rec.nodes[relu].compute


def test_unmatched_kernel_events_are_listed_and_counted_as_overhead() -> None:
    events = cpu_forward(1000, extra=[span("graph_0_cpp_fused_mystery_9", 1083, 1)])
    att = attribute_compiled(tables(events), [record()], PATHS)
    assert att.unmatched == {"graph_0_cpp_fused_mystery_9": [1, 1_000]}
    w = att.windows["forward"][0]
    assert w.unmatched_ns == 1_000 and w.overhead_ns == 25_000
    section = build_section(att, facts())
    assert section.unmatched[0].name == "graph_0_cpp_fused_mystery_9"


def test_a_graph_layerprof_did_not_compile_is_overhead() -> None:
    att = attribute_compiled(tables(cpu_forward(1000, key="other")), [record()], PATHS)
    assert att.unknown_graphs == 1 and not att.windows["forward"][0].paths


def test_keyless_graphs_are_told_apart_by_their_kernels() -> None:
    other = GraphRecord(
        key=None, compile_id="1/0", phase="forward",
        sites=(KernelSite("cpp_fused_x_0", "cpp_fused_x_0", False, ()),), nodes={},
    )  # fmt: skip
    att = attribute_compiled(
        tables(cpu_forward(1000, key="None")), [record(key=None), other], PATHS
    )
    assert att.windows["forward"][0].paths["fc"] == 30_000


def test_the_prefix_comes_from_the_innermost_eager_layer() -> None:
    """A block's forward compiled on its own (a graph break): one record, two blocks."""
    rec = GraphRecord(
        key="blk", compile_id="1/0", phase="forward",
        sites=(KernelSite("extern_kernels.addmm", "aten::addmm", True, ("addmm",)),),
        nodes={"addmm": node("addmm", "fc", "Linear", "aten::addmm", 1.0)},
    )  # fmt: skip
    events = [span(FORWARD_MARK, 0, 100), span(LAYER_RANGE, 1, 98)]
    for i, t in enumerate((10, 50)):
        events += [
            span(LAYER_RANGE + f"blocks.{i}", t, 30),
            span("Torch-Compiled Region: 1/0", t + 2, 25),
            span(f"{CALL_PREFIX}blk ##", t + 3, 20),
            span("aten::addmm", t + 4, 10 + i),
        ]
    att = attribute_compiled(tables(events), [rec], PATHS)
    w = att.windows["forward"][0]
    assert dict(w.paths) == {"blocks.0.fc": 10_000, "blocks.1.fc": 11_000}


def test_a_path_that_is_not_in_the_model_goes_to_the_frame() -> None:
    rec = GraphRecord(
        key="k", compile_id="0/0", phase="forward",
        sites=(KernelSite("extern_kernels.mm", "aten::mm", True, ("mm",)),),
        nodes={"mm": node("mm", "nowhere", "Linear", "aten::mm", 1.0)},
    )  # fmt: skip
    events = [span(FORWARD_MARK, 0, 50), span("Torch-Compiled Region: 0/0", 1, 40),
              span(f"{CALL_PREFIX}k ##", 2, 30), span("aten::mm", 3, 10)]  # fmt: skip
    att = attribute_compiled(tables(events), [rec], PATHS)
    assert att.unresolved_nodes == 1 and att.windows["forward"][0].paths[""] == 10_000


def training_records(
    bwd_sites: tuple[KernelSite, ...] | None = None, bwd_node: NodeInfo | None = None
) -> tuple[GraphRecord, GraphRecord]:
    """A forward graph with one matmul, and its backward graph (the matmul's grad)."""
    fwd = GraphRecord(
        key="f", compile_id="1/0", phase="forward",
        sites=(KernelSite("extern_kernels.mm", "aten::mm", True, ("mm",)),),
        nodes={"mm": node("mm", "fc", "Linear", "aten::mm", 1.0)},
    )  # fmt: skip
    bwd = GraphRecord(
        key=None, compile_id="1/0", phase="backward",
        sites=(KernelSite("extern_kernels.mm", "aten::mm", True, ("mm_1",)),)
        if bwd_sites is None else bwd_sites,
        nodes={"mm_1": bwd_node or node("mm_1", "fc", "Linear", "aten::mm", 1.0)},
    )  # fmt: skip
    return fwd, bwd


def training_step(backwards: int = 1) -> list[dict[str, Any]]:
    """Both blocks call the compiled forward; then ``backwards`` backward windows."""
    events = [span(FORWARD_MARK, 0, 100)]
    for i, t in enumerate((10, 50)):
        events += [span(LAYER_RANGE + f"blocks.{i}", t, 30), span("Torch-Compiled Region: 1/0", t + 1, 25),
                   span(f"{CALL_PREFIX}f ##", t + 2, 20), span("aten::mm", t + 3, 5)]  # fmt: skip
    for b in range(backwards):
        t0 = 100 + 200 * b
        events.append(span(BACKWARD_MARK, t0, 100))
        for i, t in enumerate((t0 + 10, t0 + 50)):  # blocks.1's backward runs first
            events += [span("CompiledFunctionBackward", t, 30),
                       span(f"{CALL_PREFIX}None ##", t + 1, 25),
                       span("aten::mm", t + 2, 7 + i)]  # fmt: skip
    return events


def test_backward_calls_take_their_forward_prefix_last_in_first_out() -> None:
    att = attribute_compiled(tables(training_step()), list(training_records()), PATHS)
    back = att.windows["backward"][0]
    assert dict(back.paths) == {"blocks.1.fc": 7_000, "blocks.0.fc": 8_000}
    assert back.region_ns == 60_000 and att.backward_prefix_missing == 0
    infos = (*(LayerInfo(path=p, type=t, parent=None) for p, t in TYPES.items()), *bucket_infos())
    samples = layer_samples(att, infos, {})
    assert samples["blocks.0.fc"].backward_self_ns is not None
    assert samples["blocks.0.fc"].backward_self_ns.tolist() == [8_000]
    assert samples["blocks"].backward_total_ns is not None
    assert samples["blocks"].backward_total_ns.tolist() == [15_000]


@pytest.mark.parametrize(
    ("records", "backwards", "why"),
    [
        (training_records(bwd_sites=()), 1, "no backward kernel event matched a call site"),
        (
            training_records(bwd_node=NodeInfo("mm_1", "", None, "aten::mm", 1.0, stackless=True)),
            1,
            "100% of the backward kernel time ran nodes with no forward module stack",
        ),
        (training_records(), 2, "2 profiled backward(s) for 1 forward(s) do not pair up"),
    ],
)
def test_an_unreliable_backward_mapping_shows_no_backward_rows(
    records: tuple[GraphRecord, GraphRecord], backwards: int, why: str
) -> None:
    """Where torch gives no trustworthy backward mapping, the rows get no backward time
    (not the frame's or a wrong layer's) and a note says why."""
    att = attribute_compiled(tables(training_step(backwards)), list(records), PATHS)
    assert backward_problem(att) is not None and why in str(backward_problem(att))
    infos = (*(LayerInfo(path=p, type=t, parent=None) for p, t in TYPES.items()), *bucket_infos())
    samples = layer_samples(att, infos, {})
    assert all(s.backward_self_ns is None for s in samples.values())
    assert samples["blocks.0.fc"].self_ns.tolist() == [5_000]  # the forward is unaffected
    section = build_section(att, facts())
    assert not [p for p in section.paths if p.phase == "backward"]
    assert all(not k.split for k in section.kernels if k.phase == "backward")
    said = [n for n in notes(att, section) if n.kind == "backward-not-split"]
    assert len(said) == 1 and why in said[0].data["problem"] and "no backward time" in said[0].text


def test_a_reliable_backward_mapping_is_kept() -> None:
    att = attribute_compiled(tables(training_step()), list(training_records()), PATHS)
    assert backward_problem(att) is None and att.stackless_ns.get("backward", 0) == 0
    section = build_section(att, facts())
    assert [p.path for p in section.paths if p.phase == "backward"]
    assert not [n for n in notes(att, section) if n.kind == "backward-not-split"]


# ---- CUDA: Triton launches and GPU durations ------------------------------------------


def cuda_forward(t0: float) -> list[dict[str, Any]]:
    """Triton kernels and an extern mm launched under the call; the GPU runs them later."""
    return [
        span(FORWARD_MARK, t0, 200),
        span(LAYER_RANGE, t0 + 1, 198),
        span("Torch-Compiled Region: 0/0", t0 + 5, 60),
        span(f"{CALL_PREFIX}k1 ##", t0 + 10, 50),
        span("triton_per_fused_add_native_layer_norm_0", t0 + 11, 6),
        span("cuLaunchKernelEx", t0 + 12, 4, cat="cuda_driver", correlation=int(t0) + 1),
        span("aten::addmm", t0 + 20, 10),
        span("cudaLaunchKernel", t0 + 22, 5, cat="cuda_runtime", correlation=int(t0) + 2),
        span("triton_poi_fused_gelu_view_1", t0 + 35, 6),
        span("cuLaunchKernelEx", t0 + 36, 4, cat="cuda_driver", correlation=int(t0) + 3),
        span("cudaMemsetAsync", t0 + 45, 2, cat="cuda_runtime", correlation=int(t0) + 4),
        span("cudaDeviceSynchronize", t0 + 150, 40, cat="cuda_runtime", correlation=int(t0) + 5),
        span("triton_per_fused_add_native_layer_norm_0", t0 + 70, 8, cat="kernel", tid=7,
             correlation=int(t0) + 1, device=0, stream=7),
        span("sm90_xmma_gemm_f32f32", t0 + 80, 50, cat="kernel", tid=7,
             correlation=int(t0) + 2, device=0, stream=7),
        span("triton_poi_fused_gelu_view_1", t0 + 131, 12, cat="kernel", tid=7,
             correlation=int(t0) + 3, device=0, stream=7),
        span("Memset (Device)", t0 + 144, 1, cat="gpu_memset", tid=7,
             correlation=int(t0) + 4, device=0, stream=7),
    ]  # fmt: skip


def cuda_record() -> GraphRecord:
    base = record()
    sites = (
        KernelSite("triton_per_fused_add_native_layer_norm_0",
                 "triton_per_fused_add_native_layer_norm_0", False, ("var_mean", "add")),
        base.sites[1],
        KernelSite("triton_poi_fused_gelu_view_1", "triton_poi_fused_gelu_view_1", False,
                 ("gelu", "view")),
    )  # fmt: skip
    return GraphRecord(key="k1", compile_id="0/0", phase="forward", sites=sites, nodes=base.nodes)


def test_cuda_kernels_are_timed_by_gpu_duration_via_correlation() -> None:
    att = attribute_compiled(
        tables(cuda_forward(1000) + cuda_forward(5000)), [cuda_record()], PATHS
    )
    assert att.device and att.iterations() == 2
    w = att.windows["forward"][1]
    assert dict(w.device_paths) == {"ln": 6_000, "": 2_000, "fc": 50_000, "act": 12_000}
    assert dict(w.paths) == {"ln": 4_500, "": 1_500, "fc": 10_000, "act": 6_000}  # launches
    assert w.device_overhead_ns == 1_000  # the wrapper's memset
    assert w.device_outside_ns == 0
    section = build_section(att, facts())
    assert section.device_time
    top = section.kernels[0]
    assert top.name == "aten::addmm" and top.time_ns == 50_000 and not top.estimated
    ln = next(k for k in section.kernels if k.name.startswith("triton_per"))
    assert ln.estimated and [s.path for s in ln.split] == ["ln", ""]
    infos = (*(LayerInfo(path=p, type=t, parent=None) for p, t in TYPES.items()), *bucket_infos())
    samples = layer_samples(att, infos, {"fc": 1.0})
    fc = samples["fc"]
    assert fc.device_self_ns is not None and fc.device_self_ns.tolist() == [50_000, 50_000]
    assert samples[OVERHEAD_ROW].device_self_ns is not None
    assert samples[OVERHEAD_ROW].device_self_ns.tolist() == [1_000, 1_000]
    assert samples[OUTSIDE_ROW].device_self_ns is not None


# ---- pieces ------------------------------------------------------------------------------


def facts() -> Any:
    from layerprof.capture.compiled.samples import RunFacts

    return RunFacts(
        torch="2.13.0", mode="default", dynamic=None, split="cost", regions=("",),
        recompiled=False, compile_ns=1, frames={"0/0": "forward (net.py:1)"}, breaks=(),
        recompiles=(), calls={},
    )  # fmt: skip


def test_coverage_parts_are_the_forwards_known_times() -> None:
    """cpu_forward's times: a 100 µs window, kernels of 10 + 30 + 20 µs (the 10 split),
    an 80 µs region and a 5 µs cache lookup (overhead 85 - 60), 15 µs outside both."""
    att = attribute_compiled(tables(cpu_forward(1000) + cpu_forward(2000)), [record()], PATHS)
    cov = coverage(att.windows["forward"])
    assert cov is not None
    assert (cov.forward_ns, cov.region_ns, cov.attributed_ns, cov.shared_ns) == (
        100_000, 80_000, 60_000, 10_000
    )  # fmt: skip
    assert (cov.overhead_ns, cov.outside_ns, cov.unmatched_ns) == (25_000, 15_000, 0)
    assert cov.attributed_share == pytest.approx(60 / 80)
    assert coverage([]) is None


@pytest.mark.parametrize(
    ("fqn", "path"),
    [
        ("L['self'].blocks.0.attn", "blocks.0.attn"),
        ("L['self']", ""),
        ("L['module']._modules['blocks'][0].fc", "blocks.0.fc"),
        ("L['s']._modules['a']._modules['b']", "a.b"),
        ("L['fn'].__self__.encoder", "encoder"),
        ("G['model'].fc", None),
        ("getattr(L['self'], 'x')", None),
        ("L['self'].a[-1]", None),
    ],
)
def test_module_path(fqn: str, path: str | None) -> None:
    assert module_path(fqn) == path


@pytest.mark.parametrize(
    ("kernel", "event", "extern"),
    [
        ("extern_kernels.addmm", "aten::addmm", True),
        ("extern_kernels.convolution", "aten::convolution", True),
        ("torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default",
         "aten::_scaled_dot_product_flash_attention_for_cpu", True),
        ("torch.ops.mkl._mkl_linear.default", "mkl::_mkl_linear", True),
        ("aten.mm.default", "aten::mm", True),
        ("cpp_fused_gelu_view_2", "cpp_fused_gelu_view_2", False),
        ("triton_poi_fused_add_0", "triton_poi_fused_add_0", False),
    ],
)  # fmt: skip
def test_event_names(kernel: str, event: str, extern: bool) -> None:
    assert event_name(kernel) == (event, extern)


def test_kernel_event_drops_the_graph_prefix_once() -> None:
    assert kernel_event("graph_12_cpp_fused_add_0") == "cpp_fused_add_0"
    assert kernel_event("graph_1_graph_2_x") == "graph_2_x"
    assert kernel_event("aten::addmm") == "aten::addmm"


def test_provenance_sites_are_in_handle_order_with_a_fallback() -> None:
    mapping = '{"cppCodeToPost": {"b:10": ["y"], "a:2": ["x"], "bad": ["z"]}, "version": 2}'
    assert provenance_sites(mapping, {}) == [("a", ["x"]), ("b", ["y"])]
    assert provenance_sites("", {"k:1": ["n"]}) == [("k", ["n"])]
    assert provenance_sites("not json", {"k:1": ["n"]}) == [("k", ["n"])]


def test_align_matches_in_order_and_skips() -> None:
    sites = ["a", "b", "a", "c"]
    assert align(["a", "a", "c"], sites) == [0, 2, 3]
    assert align(["x", "b", "b"], sites) == [-1, 1, -1]
    assert align([], sites) == []


def test_common_ancestor() -> None:
    assert common_ancestor(["a.b.c", "a.b.d"]) == "a.b"
    assert common_ancestor(["a.b", "a"]) == "a"
    assert common_ancestor(["a", "b"]) == ""


@given(
    st.integers(min_value=0, max_value=10**12),
    st.dictionaries(st.sampled_from(["", "a", "a.b", "c", "c.d.e"]),
                    st.floats(min_value=0, max_value=1e12), min_size=1),
    st.sampled_from(["cost", "lca", "equal"]),
)  # fmt: skip
def test_split_time_keeps_every_nanosecond(ns: int, weights: dict[str, float], rule: str) -> None:
    out = split_time(ns, weights, rule)
    assert sum(out.values()) == ns
    assert all(v >= 0 for v in out.values())
    if rule == "lca":
        assert len(out) == 1


@given(
    st.lists(st.sampled_from("abc"), max_size=12), st.lists(st.sampled_from("abcd"), max_size=12)
)
def test_align_is_monotonic(events: list[str], sites: list[str]) -> None:
    matched = [m for m in align(events, sites) if m >= 0]
    assert matched == sorted(set(matched))
    for name, m in zip(events, align(events, sites), strict=True):
        assert m < 0 or sites[m] == name


def test_a_node_a_pattern_pass_wrote_takes_its_neighbours_module() -> None:
    """Inductor writes out attention (softmax(q @ k.T) @ v) as one SDPA node with no
    module stack; it belongs to the module of the nodes around it."""
    import operator
    from types import SimpleNamespace

    import torch
    import torch.fx

    from layerprof.capture.compiled.backend import node_info

    def f(x: torch.Tensor) -> torch.Tensor:  # call_function nodes, as post-grad graphs have
        q = torch.permute(x, (0, 1))
        y = operator.mul(torch.relu(q), 2)
        return operator.add(torch.permute(y, (1, 0)), 1)

    graph = torch.fx.symbolic_trace(f).graph
    nodes = {n.name: n for n in graph.nodes}
    stack = {"a": ("L['self'].layers.0.attn", type("SelfAttention", (), {}))}
    nodes["permute"].meta["nn_module_stack"] = stack
    nodes["permute_1"].meta["nn_module_stack"] = stack
    replaced = SimpleNamespace(pass_name="_sfdp_pattern_11_inference", action=["replace"])
    nodes["relu"].meta["from_node"] = [replaced]
    found = node_info(nodes["relu"])
    assert (found.path, found.inferred) == ("layers.0.attn", True)
    # the frame's own code (no stack, not a pattern's) stays the frame's
    assert node_info(nodes["mul"]).path == "" and not node_info(nodes["mul"]).inferred
