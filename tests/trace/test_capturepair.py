"""A CUDA/HIP graph replay read through its capture (analyze --capture), on the two real
serving pairs in tests/data/serving/ and on small pairs made from code for the edge cases."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from layerprof.codec.fields import Fields
from layerprof.codec.replay import encode_replay, read_replay
from layerprof.errors import TraceError
from layerprof.pivot.profile import Profile
from layerprof.trace import analyze
from layerprof.trace.capturepair import CaptureInput, analyze_pair, paired_captures, replay_in
from tests.support.graph_traces import (
    BASE_US,
    capture_events,
    replay_events,
    two_launch_replay,
    write_trace,
)
from tests.support.paths import DATA

SERVING = DATA / "serving"
SGLANG = SERVING / "sglang_decode"
VLLM = SERVING / "vllm_decode_full"


def _pair_dir(d: Path) -> Profile:
    found = paired_captures(d)
    assert found is not None
    return analyze_pair(replay_in(d), found).ranks[0]


def _self_by_type(p: Profile) -> Counter[str]:
    out: Counter[str] = Counter()
    for layer in p.layers:
        s = p.samples[layer.path]
        assert s.device_self_ns is not None
        out[layer.type] += int(s.device_self_ns.median)
    return out


def test_sglang_replay_matches_the_other_tools_merge_per_module_class() -> None:
    p = _pair_dir(SGLANG)
    r = p.graph_replay
    assert r is not None
    assert (r.kernels, r.matched, r.graphs_matched) == (544, 544, 1)
    assert r.missed == ()
    mine = _self_by_type(p)
    with (SGLANG / "tracelens_ops_summary_by_category.csv").open() as f:
        theirs: Counter[str] = Counter()
        for row in csv.DictReader(f):
            module = row["parent_module"].removeprefix("nn.Module: ")
            theirs[module] += round(float(row["total_direct_kernel_time_ms"]) * 1e6)
    # the graph's kernels through the capture; the Sampler's argmax, launched one by one
    # after the graph, on the replay's own Sampler module
    for cls in ("MergedColumnParallelLinear", "RadixAttention", "RowParallelLinear",
                "QKVParallelLinear", "RMSNorm", "SiluAndMul", "RotaryEmbedding", "Sampler"):  # fmt: skip
        assert mine[cls] == pytest.approx(theirs[cls], rel=0.01), cls
    # 36 decoder layers, each with its attention and MLP, one layer per module instance
    assert sum(1 for x in p.layers if x.type == "Qwen3DecoderLayer") == 36
    # the replay's own timeline stays: its step and the 14 device ops outside the graph
    assert r.outside_ops == 14
    assert p.trace.steps is not None and len(p.trace.steps.steps) == 1


def test_vllm_compiled_capture_is_read_per_compiled_piece() -> None:
    p = _pair_dir(VLLM)
    r = p.graph_replay
    assert r is not None and (r.kernels, r.matched) == (421, 421)
    assert r.captures[0].compiled_pieces == 25
    pieces = {x.type: x.path for x in p.layers if x.type.startswith("CompiledFxGraph_")}
    assert set(pieces) == {"CompiledFxGraph_fpd72yox", "CompiledFxGraph_f4ii27dd",
                           "CompiledFxGraph_fiwmpzto"}  # fmt: skip
    heavy = p.samples[pieces["CompiledFxGraph_f4ii27dd"]]
    assert heavy.calls == 23
    assert heavy.device_self_ns is not None and heavy.device_self_ns.median > 9e6
    # the logits' GEMM, launched one by one after the graph, on the replay's own module
    # (TraceLens: LogitsProcessor 0.2767 ms)
    logits = _self_by_type(p)["LogitsProcessor"]
    assert logits == pytest.approx(276_678, rel=0.01)
    assert any(n.kind == "graph-capture-compiled" for n in p.notes)


def test_replay_and_capture_alone_say_what_they_are() -> None:
    replay = analyze(replay_in(VLLM)).ranks[0]
    assert replay.graph_replay is not None
    assert [(g.call, g.kernels, g.capture) for g in replay.graph_replay.graphs] == [
        ("hipGraphLaunch", 421, None)
    ]
    capture = analyze(paired_captures(VLLM)[0].path).ranks[0]  # type: ignore[index]
    notes = {n.kind: n for n in capture.notes}
    assert notes["graph-capture"].data["launches"] == 421
    assert "never ran" in notes["graph-capture"].text
    assert capture.graph_replay is None


def _pair(tmp_path: Path, replay: list, *captures: list, details: list | None = None) -> Profile:  # type: ignore[type-arg]
    r = write_trace(tmp_path / "replay.json.gz", replay)
    caps = [
        CaptureInput(
            str(write_trace(tmp_path / f"capture{i}.json.gz", c)), *(details[i] if details else ())
        )
        for i, c in enumerate(captures)
    ]
    return analyze_pair(r, caps).ranks[0]


def _device_self(p: Profile, path: str) -> int:
    s = p.samples[path].device_self_ns
    assert s is not None
    return int(s.median)


def test_each_replayed_kernel_lands_on_the_layer_that_launched_it(tmp_path: Path) -> None:
    p = _pair(tmp_path, replay_events(), capture_events())
    r = p.graph_replay
    assert r is not None and (r.kernels, r.matched) == (14, 14)
    # MLP: gemm_up (60 us) + silu + gemm_down (20 us each), the replay's own durations
    assert _device_self(p, "Decoder.Layer[1].MLP") == 100_000
    assert _device_self(p, "Decoder.Layer[0].Attention") == 20_000
    # the operator table (flat for nn.Module spans, as for any trace) has the replay's time
    ops = {o.name: o for o in p.ops}
    assert ops["aten::silu"].device_ns == 40_000
    assert ops["aten::mm"].device_ns == 2 * (20_000 + 20_000 + 60_000 + 20_000)


def test_a_dropped_kernel_leaves_the_rest_paired(tmp_path: Path) -> None:
    p = _pair(tmp_path, replay_events(drop=5), capture_events())  # layer 0's silu
    r = p.graph_replay
    assert r is not None and (r.kernels, r.matched) == (13, 13)
    assert _device_self(p, "Decoder.Layer[0].MLP") == 80_000
    assert _device_self(p, "Decoder.Layer[1].MLP") == 100_000


def test_an_extra_kernel_is_named_and_on_no_layer(tmp_path: Path) -> None:
    p = _pair(tmp_path, replay_events(extra="stray_kernel"), capture_events())
    r = p.graph_replay
    assert r is not None and (r.kernels, r.matched) == (15, 14)
    assert [(m.name, m.count, m.device_ns) for m in r.missed] == [("stray_kernel", 1, 20_000)]
    assert any(n.kind == "graph-replay-unmatched" and "stray_kernel" in n.text for n in p.notes)
    assert _device_self(p, "Decoder.Layer[0].Linear_q") == 20_000


def test_two_captures_of_different_batch_sizes_pick_the_steps_batch(tmp_path: Path) -> None:
    small, large = capture_events(batch=8), capture_events(batch=16, corr0=500)
    p = _pair(tmp_path, replay_events(batch=16), small, large, details=[(8, "FULL"), (16, "FULL")])
    r = p.graph_replay
    assert r is not None
    assert r.graphs[0].capture is not None and r.graphs[0].capture.endswith("capture1.json.gz")
    assert [c.batch for c in r.captures] == [8, 16]
    # without a batch in the step, the choice is named as ambiguous, never silent
    p = _pair(
        tmp_path, replay_events(batch=None), small, large, details=[(8, "FULL"), (16, "FULL")]
    )
    assert any(n.kind == "graph-replay-ambiguous" for n in p.notes)


def test_a_capture_of_another_model_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as err:
        _pair(tmp_path, replay_events(), capture_events(prefix="other_"))
    text = str(err.value)
    assert "no capture matches" in text and "capture0.json.gz" in text and "\n" not in text


def test_a_replay_without_graph_launch_is_refused(tmp_path: Path) -> None:
    plain = [e for e in replay_events() if e["name"] != "cudaGraphLaunch"]
    with pytest.raises(TraceError, match="no graph launch"):
        _pair(tmp_path, plain, capture_events())


def test_a_truncated_capture_is_refused_naming_it(tmp_path: Path) -> None:
    r = write_trace(tmp_path / "replay.json.gz", replay_events())
    text = json.dumps({"traceEvents": capture_events()})
    c = write_trace(tmp_path / "cut.json.gz", capture_events(), cut=len(text) // 2)
    with pytest.raises(TraceError, match=r"cut\.json\.gz"):
        analyze_pair(r, [CaptureInput(str(c))])


def test_a_capture_cut_before_its_launches_is_refused(tmp_path: Path) -> None:
    begun = capture_events()[:2]  # the annotation and BeginCapture: nothing captured
    with pytest.raises(TraceError, match="no launches recorded while capturing"):
        _pair(tmp_path, replay_events(), begun)


def test_the_section_survives_the_codec() -> None:
    p = _pair_dir(SGLANG)
    r = p.graph_replay
    assert r is not None
    back = read_replay(Fields(json.loads(json.dumps(encode_replay(r))), "graph_replay"))
    assert back == r


def test_a_graph_no_capture_recorded_is_named_and_on_no_layer(tmp_path: Path) -> None:
    p = _pair(tmp_path, two_launch_replay(), capture_events())
    r = p.graph_replay
    assert r is not None
    assert [(g.kernels, g.matched, g.capture is not None) for g in r.graphs] == [
        (14, 14, True),
        (3, 0, False),
    ]
    assert r.graphs_matched == 1 and r.device_ns - r.matched_ns == 75_000
    assert [n.data.get("launch") for n in p.notes if n.kind == "graph-replay-no-capture"] == [2]


def test_a_capture_no_graph_launch_replays_is_named(tmp_path: Path) -> None:
    other = capture_events(prefix="other_", batch=4, corr0=700)
    p = _pair(tmp_path, replay_events(), capture_events(), other)
    unused = [n for n in p.notes if n.kind == "graph-capture-unused"]
    assert len(unused) == 1 and "capture1.json.gz" in unused[0].text


def test_one_capture_file_holding_two_batch_sizes_gives_two_graphs(tmp_path: Path) -> None:
    both = capture_events(batch=8) + capture_events(batch=16, base=BASE_US + 20_000, corr0=500)
    p = _pair(tmp_path, replay_events(batch=16), both)
    r = p.graph_replay
    assert r is not None
    assert (r.captures[0].graphs, r.captures[0].batches) == (2, (8, 16))
    assert r.captures[0].launches == 28 and r.captures[0].batch is None
    assert (r.graphs[0].matched, r.graphs[0].capture_batch) == (14, 16)
    assert _device_self(p, "Decoder.Layer[1].MLP") == 100_000


def test_a_capture_alone_counts_the_launches_that_never_ran(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "capture.json.gz", capture_events())
    notes = {n.kind: n for n in analyze(path).ranks[0].notes}
    assert notes["graph-capture"].data == {"captures": 1, "launches": 14}


def test_the_python_api_pairs_a_folder_and_takes_capture(tmp_path: Path) -> None:
    r = analyze(SGLANG).ranks[0].graph_replay
    assert r is not None and (r.kernels, r.matched) == (544, 544)
    replay = write_trace(tmp_path / "replay.json.gz", replay_events())
    capture = write_trace(tmp_path / "capture.json.gz", capture_events())
    r = analyze(replay, capture=capture).ranks[0].graph_replay
    assert r is not None and (r.kernels, r.matched) == (14, 14)


def test_a_decode_loops_launches_of_one_graph_add_up(tmp_path: Path) -> None:
    steps = [replay_events(base=BASE_US + 1e6 + 10_000 * i, corr=9000 + i) for i in range(3)]
    p = _pair(tmp_path, [e for step in steps for e in step], capture_events())
    r = p.graph_replay
    assert r is not None and [g.matched for g in r.graphs] == [14, 14, 14]
    assert _device_self(p, "Decoder.Layer[1].MLP") == 300_000
    assert any(n.kind == "graph-replay-repeated" for n in p.notes)


def test_two_graphs_read_through_two_capture_files(tmp_path: Path) -> None:
    first = replay_events()
    second = [
        {**e, "name": "other_" + e["name"]} if e["cat"] == "kernel" else e
        for e in replay_events(base=BASE_US + 2e6, corr=9001)
    ]
    other = capture_events(prefix="other_", base=BASE_US + 50_000, corr0=100)  # ids clash
    p = _pair(tmp_path, first + second, capture_events(), other)
    r = p.graph_replay
    assert r is not None and [g.matched for g in r.graphs] == [14, 14]
    assert [g.capture is not None and g.capture[-17:] for g in r.graphs] == [
        "/capture0.json.gz",
        "/capture1.json.gz",
    ]
    # one module tree in both captures: each layer holds both graphs' kernels, two calls
    mlps = [x.path for x in p.layers if x.type == "MLP"]
    assert len(mlps) == 2 and all(_device_self(p, m) == 200_000 for m in mlps)
    assert p.samples[mlps[0]].calls == 2 * 3  # a span per launch in capture_events


def test_the_layer_source_is_the_captures(tmp_path: Path) -> None:
    p = _pair(tmp_path, replay_events(), capture_events())  # the replay has no module spans
    kinds = [n.kind for n in p.notes]
    assert "layer-source" in kinds and "no-module-events" not in kinds
    assert p.trace.source is not None and p.trace.source.module_source == "nn.Module"


def test_a_step_batch_no_capture_has_is_named(tmp_path: Path) -> None:
    p = _pair(tmp_path, replay_events(batch=30), capture_events(batch=32))
    r = p.graph_replay
    assert r is not None and r.matched == 14 and r.graphs[0].capture_batch == 32
    (note,) = [n for n in p.notes if n.kind == "graph-replay-batch"]
    assert note.data == {"step_batch": 30, "capture_batch": 32, "launches": 1}


def test_ops_carry_the_capture_shapes_and_the_replay_times() -> None:
    found = paired_captures(SGLANG)
    assert found is not None
    p = analyze_pair(replay_in(SGLANG), found, group_by_shape=True).ranks[0]
    mm = {o.input_shapes: o for o in p.ops if o.name == "aten::mm"}
    up = mm["[32, 4096], [4096, 24576]"]  # the MLP's gate/up projection, batch 32
    assert up.calls == 36 and up.device_ns == pytest.approx(2_417_659, abs=1)


def _decode_name(kv: int) -> str:
    return f"execute_8_context_0(sq0sk0sqsq0sqsk0)_generation_8(sq8sk{kv}sqsq8sqsk{kv})"


def test_serving_phases_are_the_captured_layers_kernel_time_per_step(tmp_path: Path) -> None:
    """Three decode steps each replaying the graph, its kernels 20, 22 and 24 µs (gemm_up
    3x): the MLP's kernels are 100, 110 and 120 µs of each step, so its decode time is
    110 µs per step on the device's clock (the replay has no module spans: these are the
    captured layers') and it grows 10 µs per 8 KV positions (1,250 µs per 1k)."""
    replay = []
    for i, us in enumerate((20.0, 22.0, 24.0)):
        events = replay_events(base=BASE_US + 1e6 + 10_000 * i, corr=9000 + i, kernel_us=us)
        replay += [{**events[0], "name": _decode_name(4000 + 8 * i)}, *events[1:]]
    p = _pair(tmp_path, replay, capture_events())
    s = p.trace.serving
    assert s is not None and s.phase_clock == "device"
    (decode,) = s.phases
    assert decode.forwards == 3
    mlp = decode.layer("Decoder.Layer[1].MLP")
    assert mlp is not None and mlp.self_ns == 110_000
    assert mlp.growth_ns_per_1k == pytest.approx(1_250_000)
    # 7 kernels, gemm_up 3x: 9 kernel times, all under the layer's children
    layer = decode.layer("Decoder.Layer[0]")
    assert layer is not None and (layer.total_ns, layer.self_ns) == (9 * 22_000, 0)


def test_a_real_replays_phase_times_are_its_captured_layers(tmp_path: Path) -> None:
    """The SGLang decode step read through its capture: the decode phase's layers are the
    capture's (36 RadixAttention, ...) with the replay's kernel time, the same as the
    layer table's device self time (one step), summing to the graph's 9.656 ms."""
    p = _pair_dir(SGLANG)
    s = p.trace.serving
    assert s is not None and s.phase_clock == "device"
    (decode,) = s.phases
    attention = [x for x in decode.layers if x.path.endswith("RadixAttention")]
    assert len(attention) == 36
    for x in decode.layers:
        assert x.self_ns == _device_self(p, x.path), x.path
    assert sum(x.self_ns for x in decode.layers) == pytest.approx(9.656e6 + 122e3, rel=0.01)


def test_the_vllm_replays_graph_launch_is_not_launch_bound() -> None:
    """vLLM's decode replay: 421 device ops from one hipGraphLaunch and 13 launched one by
    one. Each replayed op against the ~507 µs launch read '429 of 434 ops shorter than
    their launch call' and a launch-bound finding; the graph launch counts once."""
    from layerprof.analysis.diagnose import diagnose

    p = analyze(VLLM / "graph_execution.json.gz").ranks[0]
    q = p.trace.queues
    assert q is not None and (q.graph_launches, q.graph_ops, q.kernels) == (1, 421, 14)
    assert q.short_kernels <= q.kernels
    assert not [f for f in diagnose(p) if "shorter than their launch" in f.title]


def test_serving_flops_come_from_the_captured_ops_shapes(tmp_path: Path) -> None:
    """Three decode steps replaying a graph whose capture recorded its products' shapes
    ([8, 64] x [64, 64], 4 per layer, 2 layers): each step counts 8 x 2*8*64*64 FLOPs
    from the captured ops (the replay has none), its products' kernels 12 of its 18
    kernel times (gemm_up 3x); the other ops are named as what stays uncounted."""
    replay = []
    for i, us in enumerate((20.0, 22.0, 24.0)):
        events = replay_events(base=BASE_US + 1e6 + 10_000 * i, corr=9000 + i, kernel_us=us)
        replay += [{**events[0], "name": _decode_name(4000 + 8 * i)}, *events[1:]]
    p = _pair(tmp_path, replay, capture_events(shapes=True))
    s = p.trace.serving
    assert s is not None
    assert [x.flops for x in s.steps] == [8 * 2 * 8 * 64 * 64] * 3
    assert [x.flop_device_ns for x in s.steps] == [12 * 20_000, 12 * 22_000, 12 * 24_000]
    assert all(x.flop_coverage == pytest.approx(12 / 18) for x in s.steps)
    assert "serving-flops" not in {n.kind for n in p.notes}  # over half the time counted
    # without the capture's shapes nothing is counted, and the note names what was not
    bare = _pair(tmp_path, replay, capture_events())
    assert (
        bare.trace.serving is not None and [x.flops for x in bare.trace.serving.steps] == [None] * 3
    )
    (note,) = [n for n in bare.notes if n.kind == "serving-flops"]
    assert "mostly in aten::mm 67%, aten::rms_norm 11%, attn::decode 11%" in note.text


def test_a_real_replays_flops_are_its_captured_products() -> None:
    """SGLang's Qwen3-8B decode step of 32 tokens read through its capture: 36 layers of
    QKV (4096 -> 6144), o (4096 -> 4096), gate/up (4096 -> 24576) and down (12288 ->
    4096) products, plus the LM head (4096 -> 151936) outside the graph, all counted:
    484.4 GFLOP, 59 % of the step's device time (the replay alone counted none). vLLM's
    GPT-OSS step: its experts are one custom op, named in the note."""
    p = _pair_dir(SGLANG)
    assert p.trace.serving is not None
    (step,) = p.trace.serving.steps
    layer = 2 * 4096 * (6144 + 4096 + 24576) + 2 * 12288 * 4096
    assert step.flops == 32 * (36 * layer + 2 * 4096 * 151936)
    assert step.flop_coverage == pytest.approx(0.59, abs=0.01)
    vllm = _pair_dir(VLLM)
    assert vllm.trace.serving is not None and (vllm.trace.serving.steps[0].flops or 0) > 37.1e9
    (note,) = [n for n in vllm.notes if n.kind == "serving-flops"]
    assert "vllm::moe_forward" in note.text


def test_one_steps_layer_times_are_the_merges_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay of one step that launched every device op takes the merge's samples
    (a shortcut): they equal what the per-step split gives, layer by layer."""
    import layerprof.trace.replaysteps as rs

    seen: list[tuple[object, ...]] = []
    real = rs.serving_through_capture

    def spy(*args: Any) -> Any:
        seen.append(args)
        return real(*args)

    monkeypatch.setattr(rs, "serving_through_capture", spy)
    p = _pair_dir(SGLANG)
    ((_, replay, steps, merged, header, samples),) = seen
    done = steps.complete  # type: ignore[attr-defined]
    step_of = rs.launch_steps(replay, done)  # type: ignore[arg-type]
    assert len(done) == 1 and (step_of == 0).all()
    per_step = rs.step_device_samples(rs.linked(merged, header), step_of, 1)  # type: ignore[arg-type]
    assert samples is p.samples and set(per_step) == set(p.samples)
    for path, s in per_step.items():
        mine = p.samples[path]
        assert mine.device_total_ns is not None and mine.device_self_ns is not None
        assert s.device_total_ns is not None and s.device_self_ns is not None
        assert s.device_total_ns.values.tolist() == mine.device_total_ns.values.tolist(), path
        assert s.device_self_ns.values.tolist() == mine.device_self_ns.values.tolist(), path
