"""Serving steps by phase: roofline step annotations parsed into a batch composition,
prefill / decode / mixed steps apart (per layer, per step, FLOPs from the matrix
products' shapes), hostile annotations left out with a note, and the real replays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layerprof import codec
from layerprof.analysis.diff import diff
from layerprof.errors import ProfileFormatError
from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.serving import DECODE, MIXED, PREFILL, BatchPart
from layerprof.trace import analyze
from layerprof.trace.batch import parse
from tests.support.kineto_docs import gpu_op, span, write
from tests.support.paths import DATA

US = 1000  # ns per µs
K, N = 64, 128  # the model's one matrix product: [tokens, K] x [K, N]


def name_of(pre: tuple[int, int, int], dec: tuple[int, int]) -> str:
    """A roofline annotation: prefill (requests, tokens, KV) and decode (requests, KV); a
    prefill request attends over its own tokens (Σq² and Σq·k worked out for one
    request per prefill, or zero)."""
    pr, pt, pk = pre
    dr, dk = dec
    psq = pt * pt if pr else 0
    return (
        f"execute_{pt + dr}_context_{pr}(sq{pt}sk{pk}sqsq{psq}sqsk{pt * pk if pr else 0})"
        f"_generation_{dr}(sq{dr}sk{dk}sqsq{dr}sqsk{dk})"
    )


def step_events(
    i: int, t0: float, name: str, tokens: int, linear_us: float, kernel_us: float | None = 30.0
) -> list[dict[str, Any]]:
    """One engine step at t0 (µs), 100 µs on the host:

    0   <annotation>                        100
    1     nn.Module: Model_0                 98
    2       nn.Module: Linear_0              linear_us
    3         aten::mm [tokens,K]x[K,N]      linear_us - 2   launch 4..5 -> gemm 10..40

    (the gemm lasts ``kernel_us``; None: no device ops)
    """
    c = 100 + i
    gemm = [] if kernel_us is None else [gpu_op("kernel", "gemm", t0 + 10, kernel_us, c, 0, 7)]
    return [
        span("user_annotation", name, t0, 100),
        span("python_function", "nn.Module: Model_0", t0 + 1, 98),
        span("python_function", "nn.Module: Linear_0", t0 + 2, linear_us),
        span(
            "cpu_op",
            "aten::mm",
            t0 + 3,
            linear_us - 2,
            **{"External id": c, "Input Dims": [[tokens, K], [K, N]]},
        ),
        span("cuda_runtime", "cudaLaunchKernel", t0 + 4, 1, correlation=c),
        *gemm,
    ]


#: (prefill (requests, tokens, KV), decode (requests, KV), linear µs) per step
STEPS = (
    ((2, 300, 300), (0, 0), 60.0),  # prefill
    ((0, 0, 0), (8, 4000), 20.0),  # decode
    ((0, 0, 0), (8, 4008), 22.0),  # decode
    ((1, 100, 100), (7, 3600), 40.0),  # mixed
    ((0, 0, 0), (8, 4016), 24.0),  # decode
)


def serving_doc(
    extra: list[dict[str, Any]] | None = None,
    slower: float = 0.0,
    *,
    kernels: str = "fixed",
) -> dict[str, Any]:
    """``kernels``: each step's gemm 30 µs (``fixed``), half its Linear's host time
    (``half``), or none (``none``: a host-only trace)."""
    events: list[dict[str, Any]] = []
    for i, (pre, dec, lin) in enumerate(STEPS):
        name = name_of(pre, dec)
        host = lin + (slower if dec[0] else 0)
        gemm = {"fixed": 30.0, "half": host / 2, "none": None}[kernels]
        events += step_events(i, 200.0 * i, name, pre[1] + dec[0], host, gemm)
    return {"traceEvents": events + (extra or [])}


def profile_of(tmp_path: Path, doc: dict[str, Any], name: str = "t.json") -> Profile:
    return analyze(write(tmp_path, doc, name)).rank()


def test_the_issue_example_parses() -> None:
    name = (
        "execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)"
        "_generation_37(sq37sk34489sqsq37sqsk34489)"
    )
    assert parse(name) == (
        8192,
        BatchPart(9, 8155, 8430, 7475785, 7671310),
        BatchPart(37, 37, 34489, 37, 34489),
    )


def test_steps_are_classed_and_measured_by_phase(tmp_path: Path) -> None:
    p = profile_of(tmp_path, serving_doc())
    s = p.trace.serving
    assert s is not None
    assert [x.phase for x in s.steps] == [PREFILL, DECODE, DECODE, MIXED, DECODE]
    first = s.steps[0]
    assert first.prefill == BatchPart(2, 300, 300, 90000, 90000)
    assert first.decode == BatchPart(0, 0, 0, 0, 0)
    # 100 µs steps (the device work lies inside them): 300 tokens -> 3 M tokens/s
    assert first.time_ns == 100 * US
    assert first.tokens_per_s == pytest.approx(3e6)
    assert first.ns_per_prefill_token == pytest.approx(100 * US / 300)
    assert first.ns_per_decode_request is None
    decode = s.steps[1]
    assert decode.ns_per_decode_request == pytest.approx(100 * US / 8)
    assert decode.ns_per_prefill_token is None
    # FLOPs from the product's real token count: 2 * tokens * K * N; its kernel 30 µs
    assert first.flops == 2 * 300 * K * N
    assert decode.flops == 2 * 8 * K * N
    assert first.flop_device_ns == 30 * US and first.flop_coverage == pytest.approx(1.0)
    assert first.flop_rate == pytest.approx(2 * 300 * K * N / 30e-6)
    assert "serving-flops" not in {n.kind for n in p.notes}


def test_layers_per_phase_reuse_the_generate_views(tmp_path: Path) -> None:
    """Linear's self time is 60 µs in the prefill step, 20/22/24 µs in the decode steps
    (median 22) and 40 µs in the mixed one; decode's growth is per 1,000 KV positions
    (2 µs per 8 positions -> 250 µs per 1k). A host-only trace: the host's clock."""
    s = profile_of(tmp_path, serving_doc(kernels="none")).trace.serving
    assert s is not None and s.phase_clock == "host"
    assert [ph.name for ph in s.phases] == [PREFILL, DECODE, MIXED]
    linear = {ph.name: ph.layer("Model.Linear") for ph in s.phases}
    assert all(x is not None for x in linear.values()), [ph.layers for ph in s.phases]
    assert linear[PREFILL].self_ns == 60 * US  # type: ignore[union-attr]
    assert linear[DECODE].self_ns == 22 * US  # type: ignore[union-attr]
    assert linear[MIXED].self_ns == 40 * US  # type: ignore[union-attr]
    growth = linear[DECODE].growth_ns_per_1k  # type: ignore[union-attr]
    assert growth == pytest.approx(250 * US)
    decode = s.phase(DECODE)
    assert decode is not None and (decode.forwards, decode.tokens_per_forward) == (3, 8)


def test_layers_per_phase_are_their_kernels_time_where_the_trace_has_them(
    tmp_path: Path,
) -> None:
    """Each step's gemm lasts half its Linear's host time: 30 µs in the prefill step,
    10/11/12 µs in the decode steps (median 11), 20 µs in the mixed one, and decode
    grows 125 µs per 1k KV positions: the device's clock, named as such."""
    s = profile_of(tmp_path, serving_doc(kernels="half")).trace.serving
    assert s is not None and s.phase_clock == "device"
    linear = {ph.name: ph.layer("Model.Linear") for ph in s.phases}
    assert {k: x.self_ns for k, x in linear.items() if x is not None} == {
        PREFILL: 30 * US,
        DECODE: 11 * US,
        MIXED: 20 * US,
    }
    growth = linear[DECODE].growth_ns_per_1k  # type: ignore[union-attr]
    assert growth == pytest.approx(125 * US)


HOSTILE = (
    "execute_abc",
    "execute_99999999999999999999_context_0(sq0sk0sqsq0sqsk0)_generation_1(sq1sk1sqsq1sqsk1)",
    "execute_-5_context_0(sq0sk0sqsq0sqsk0)_generation_1(sq1sk1sqsq1sqsk1)",
    "execute_5_context_0(sq5sk0sqsq0sqsk0)_generation_0(sq0sk0sqsq0sqsk0)",  # tokens, no requests
    "execute_4_context_2(sq1sk1sqsq1sqsk1)_generation_0(sq0sk0sqsq0sqsk0)",  # 1 token, 2 requests
    "execute_1_context_0(sq0sk0sqsq0sqsk0)_generation_1(sq1sk1sqsq1sqsk1)\x1b[31m",
    "execute_0_context_0(sq0sk0sqsq0sqsk0)_generation_0(sq0sk0sqsq0sqsk0)",  # an empty batch
)


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_annotations_are_not_read(name: str) -> None:
    assert parse(name) is None or not (parse(name)[1].requests or parse(name)[2].requests)  # type: ignore[index]


def test_hostile_steps_are_left_out_with_a_note(tmp_path: Path) -> None:
    extra: list[dict[str, Any]] = []
    for j, name in enumerate(HOSTILE):
        extra += step_events(50 + j, 2000.0 + 200 * j, name, 4, 20.0)
    p = profile_of(tmp_path, serving_doc(extra))
    s = p.trace.serving
    assert s is not None
    assert len(s.steps) == len(STEPS)
    assert s.ignored_count == len(HOSTILE)
    (note,) = [n for n in p.notes if n.kind == "serving-annotations-ignored"]
    assert note.data == {"count": len(HOSTILE)}
    back = codec.profile_from_dict(codec.to_dict(p))
    assert back.trace.serving == s


def test_an_annotation_inside_a_profiler_step_names_its_phase(tmp_path: Path) -> None:
    """prof.step() around the engine: ProfilerStep#n holds the execute_ annotation."""
    events: list[dict[str, Any]] = []
    for i, (pre, dec, lin) in enumerate(STEPS):
        inner = step_events(i, 200.0 * i + 10, name_of(pre, dec), pre[1] + dec[0], lin)
        events += [span("user_annotation", f"ProfilerStep#{i}", 200.0 * i, 150), *inner]
    p = profile_of(tmp_path, {"traceEvents": events})
    assert p.trace.steps is not None and p.trace.steps.source == "ProfilerStep"
    assert p.trace.serving is not None
    assert [x.phase for x in p.trace.serving.steps] == [PREFILL, DECODE, DECODE, MIXED, DECODE]
    assert p.trace.serving.steps[0].name.startswith("execute_300_context_2(")


def test_steps_of_one_name_keep_their_own_times(tmp_path: Path) -> None:
    """Two decode steps with the same batch (the same annotation): the first's kernel runs
    inside its 100 µs span, the second's 1,000 µs after its launch, so the second lasts
    its work's own span (a 30 µs kernel: 30 µs) and the first its host span."""
    name = name_of((0, 0, 0), (8, 4000))
    first = step_events(0, 0.0, name, 8, 20.0)
    second = step_events(1, 200.0, name, 8, 20.0)
    second[-1]["ts"] = 200.0 + 1004
    p = profile_of(tmp_path, {"traceEvents": first + second})
    s = p.trace.serving
    assert s is not None
    assert [x.time_ns for x in s.steps] == [100 * US, 30 * US]
    (note,) = [n for n in p.notes if n.kind == "device-window"]
    assert note.text.startswith("1 of 2 steps")


def test_a_trace_without_annotations_has_no_serving_section(tmp_path: Path) -> None:
    events = step_events(0, 0.0, "forward", 4, 20.0) + step_events(1, 200.0, "forward", 4, 20.0)
    assert profile_of(tmp_path, {"traceEvents": events}).trace.serving is None


def test_serving_survives_a_save(tmp_path: Path) -> None:
    p = profile_of(tmp_path, serving_doc())
    back = codec.profile_from_dict(codec.to_dict(p))
    assert back.trace.serving == p.trace.serving


def test_diff_compares_the_phases_apart(tmp_path: Path) -> None:
    """Decode steps' Linear 30 µs slower, its kernel 15 µs (the phases' clock: the
    device's), prefill's unchanged: the diff's decode rows move, its prefill rows do not."""
    base = profile_of(tmp_path, serving_doc(kernels="half"), "base.json")
    new = profile_of(tmp_path, serving_doc(slower=30.0, kernels="half"), "new.json")
    d = diff(base, new)
    rows = {(r.phase, r.path): r.change for r in d.phases}
    assert rows[("decode steps", "Model.Linear")].delta_ns == 15 * US
    assert rows[("prefill steps", "Model.Linear")].delta_ns == 0
    labels = {r.label for r in d.phases}
    assert "decode steps: step time" in labels and "decode steps: Model.Linear" in labels
    assert d.phases_title.startswith("Serving steps")
    plain = {"traceEvents": step_events(0, 0.0, "forward", 4, 20.0)}
    one_sided = diff(base, profile_of(tmp_path, plain, "plain.json"))
    assert not one_sided.phases
    assert any("no serving steps" in w for w in one_sided.warnings)


@pytest.mark.parametrize(
    ("folder", "file", "kv", "time_ms"),
    [
        ("vllm_decode_full", "graph_execution.json.gz", 55086, 10.743),
        ("sglang_decode", "sglang_Qwen3-8B_decode.json.gz", 32785, 473.831),
    ],
)
def test_real_replays_are_decode_steps(folder: str, file: str, kv: int, time_ms: float) -> None:
    """Both replays are one decode step of 32 requests; its time is its device work's own
    span (the kernels ran after the host step)."""
    p = analyze(DATA / "serving" / folder / file).rank()
    s = p.trace.serving
    assert s is not None
    (step,) = s.steps
    assert step.phase == DECODE
    assert step.decode == BatchPart(32, 32, kv, 32, kv)
    assert step.time_ns / 1e6 == pytest.approx(time_ms, abs=1e-3)
    # the graph's kernels have no ops: FLOPs are counted for the few products outside it
    assert "serving-flops" in {n.kind for n in p.notes}


@given(st.lists(st.integers(-(2**60), 2**60), min_size=1, max_size=40))
def test_phase_medians_are_numpys(values: list[int]) -> None:
    """The per-phase median's Python path (a few integers) is np.median's, bit for bit."""
    from layerprof.pivot.sections.generation import _median

    a = np.asarray(values, dtype=np.int64)
    assert _median(a) == float(np.median(a))


def test_phases_on_different_clocks_compare_only_their_step_times(tmp_path: Path) -> None:
    """A host-only trace against one with kernels: the layers' phase times are not
    compared (host against device time), the step times are, and a warning says so."""
    base = profile_of(tmp_path, serving_doc(kernels="none"), "base.json")
    new = profile_of(tmp_path, serving_doc(kernels="half"), "new.json")
    assert base.trace.serving is not None and new.trace.serving is not None
    assert (base.trace.serving.phase_clock, new.trace.serving.phase_clock) == ("host", "device")
    d = diff(base, new)
    assert d.phases and all(r.path is None for r in d.phases)
    assert any("host's in the base and the device's" in w for w in d.warnings)


def test_a_saved_phase_clock_is_checked(tmp_path: Path) -> None:
    """An unknown phase clock in a saved file is a one-line error naming the key."""
    p = profile_of(tmp_path, serving_doc())
    doc = codec.to_dict(p)
    doc["serving"]["phase_clock"] = "wall"
    with pytest.raises(ProfileFormatError, match="phase_clock: expected host or device"):
        codec.profile_from_dict(doc)
