"""profile(model, prompt, generate=N) (issue 35, first part): prefill and decode apart, on
tiny Hugging Face causal LMs built from configs, with a layer of known cost per phase."""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch import nn

import layerprof
from layerprof import codec
from layerprof.capture.generate import LAYER_GENERATES
from layerprof.capture.platform.clocks import FakeClock
from layerprof.errors import UsageError
from tests.support.paths import ROOT
from tests.support.zoo_models import ToyLM

transformers = pytest.importorskip("transformers")

PREFILL_S, DECODE_S = 0.004, 0.002


def gpt2(layers: int = 2, dim: int = 64, heads: int = 2) -> nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=layers, n_embd=dim, n_head=heads, vocab_size=128, n_positions=128
    )
    return transformers.GPT2LMHeadModel(config).eval()


#: The per-layer pass's clock: each mark 1 µs on, and KnownCost's cost on top, so that
#: its verdicts do not depend on the machine's load (a 2 ms sleep read 7.5 ms under it).
TICK_NS = 1_000


class KnownCost(nn.Module):
    """Costs a known time per forward: PREFILL_S on the prompt, DECODE_S on one token;
    slept, for the clean pass's clock, and added to ``clock``, the per-layer pass's."""

    def __init__(self, inner: nn.Module, clock: FakeClock | None = None) -> None:
        super().__init__()
        self.inner, self.clock = inner, clock

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cost = PREFILL_S if x.shape[1] > 1 else DECODE_S
        time.sleep(cost)
        if self.clock is not None:
            self.clock.advance(round(cost * 1e9))
        out: torch.Tensor = self.inner(x)
        return out


@pytest.fixture(scope="module")
def profiled() -> layerprof.Profile:
    from layerprof.capture.generate import profile_generate

    clock = FakeClock(tick_ns=TICK_NS)
    model = gpt2()
    model.transformer.h[0].mlp = KnownCost(model.transformer.h[0].mlp, clock)
    prompt = torch.randint(0, 128, (2, 16))
    return profile_generate(model, (prompt,), {}, 6, warmup=1, iters=3, clock=clock)


def test_the_clean_pass_times_first_token_and_gaps(profiled: layerprof.Profile) -> None:
    g = profiled.generation
    assert g is not None
    assert (g.new_tokens, g.prompt_tokens, g.batch, g.generates) == (6, 16, 2, 3)
    assert g.ttft_ns.n == 3 and g.itl_ns is not None and g.itl_ns.n == 3 * 5
    assert g.ttft_ns.summary.min >= PREFILL_S * 1e9  # the prefill forward holds the known sleep
    assert g.itl_ns.summary.min >= DECODE_S * 1e9
    assert g.generate_ns.summary.min >= g.ttft_ns.summary.min + 5 * DECODE_S * 1e9
    assert g.prefill_tokens_per_s == pytest.approx(32 / (g.ttft_ns.median / 1e9))
    assert g.decode_tokens_per_s == pytest.approx(2 / (g.itl_ns.median / 1e9))


def test_each_layer_per_phase_holds_its_known_cost(profiled: layerprof.Profile) -> None:
    g = profiled.generation
    assert g is not None
    prefill, decode = g.phase("prefill"), g.phase("decode")
    assert prefill is not None and decode is not None
    assert (prefill.forwards, decode.forwards) == (LAYER_GENERATES, LAYER_GENERATES * 5)
    assert (prefill.tokens_per_forward, decode.tokens_per_forward) == (32, 2)
    for phase, known in ((prefill, PREFILL_S), (decode, DECODE_S)):
        row = phase.layer("transformer.h.0.mlp")
        assert row is not None
        # on the fake clock: the known cost and a few ticks of its own marks
        assert known * 1e9 <= row.self_ns <= known * 1e9 + 10 * TICK_NS, (phase.name, row)
        assert row.total_ns >= row.self_ns
    other = decode.layer("transformer.h.1.mlp")
    assert other is not None and other.self_ns <= 10 * TICK_NS
    assert decode.layer("transformer.h.0.attn") is not None
    grows = decode.layer("transformer.h.0.attn")
    assert grows is not None and grows.growth_ns_per_1k is not None


def test_the_kv_cache_is_the_analytic_count(profiled: layerprof.Profile) -> None:
    g = profiled.generation
    assert g is not None and g.kv_cache is not None
    positions = 16 + 6 - 1  # the last token's keys and values are not stored
    assert g.kv_cache.positions == positions
    # 2 (keys, values) x kv heads x head dim x positions x batch x 4 bytes, per layer
    per_layer = 2 * 2 * 32 * positions * 2 * 4
    assert g.kv_cache.layers == (per_layer, per_layer)
    assert g.kv_cache.bytes_per_token == pytest.approx(2 * per_layer / positions)


def test_the_section_survives_the_file_and_renders(profiled: layerprof.Profile) -> None:
    data = json.loads(json.dumps(codec.to_dict(profiled)))
    again = codec.from_dict(data)
    assert isinstance(again, layerprof.Profile) and again.generation is not None
    assert (
        codec.to_dict(codec.from_dict(codec.to_dict(again)))["generation"]
        == codec.to_dict(again)["generation"]
    )
    assert again.generation.ttft_ns == profiled.generation.ttft_ns  # type: ignore[union-attr]
    text = str(again.render("console"))
    assert "time to first token" in text and "inter-token latency" in text
    assert "transformer.h.0.mlp" in text and "KV cache" in text
    page = str(again.render("html"))
    assert 'id="generation"' in page and "Decode self" in page
    assert data["generation"]["prefill_tokens_per_s"] > 0


# ---- other families: GQA, a static cache, an encoder-decoder ---------------------------


def llama(kv_heads: int) -> nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, vocab_size=128, max_position_embeddings=128,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize(("kv_heads", "cache"), [(2, None), (1, "static"), (4, "dynamic")])
def test_llama_kv_cache_is_the_analytic_count(kv_heads: int, cache: str | None) -> None:
    """GQA (2 of 4 heads), MQA (1) and full attention; a static cache is sized to the
    generate's length, so it holds the same bytes at the end."""
    prompt = torch.randint(0, 128, (2, 12))
    kwargs = {"cache_implementation": cache} if cache else {}
    prof = layerprof.profile(llama(kv_heads), prompt, kwargs=kwargs, generate=5, warmup=0, iters=1)
    g = prof.generation
    assert g is not None and g.kv_cache is not None
    positions = 12 + 5 - 1
    head_dim = 64 // 4
    # 2 (keys, values) x kv heads x head dim x positions x batch x 4 bytes, per layer
    per_layer = 2 * kv_heads * head_dim * positions * 2 * 4
    assert g.kv_cache.positions == positions and g.kv_cache.cross_bytes == 0
    assert g.kv_cache.layers == (per_layer, per_layer)
    assert [(p.name, p.forwards) for p in g.phases] == [
        ("prefill", LAYER_GENERATES), ("decode", LAYER_GENERATES * 4),
    ]  # fmt: skip
    decode = g.phase("decode")
    assert decode is not None and decode.layer("model.layers.1.self_attn") is not None


def test_t5_encodes_once_then_decodes_from_one_start_token() -> None:
    """generate() runs T5's encoder apart, before the decoder's first forward: its layers
    are the encode phase (the prompt's tokens); the prefill is the decoder start token."""
    torch.manual_seed(0)
    config = transformers.T5Config(
        d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16, vocab_size=128,
        decoder_start_token_id=0,
    )  # fmt: skip
    model = transformers.T5ForConditionalGeneration(config).eval()
    prompt = torch.randint(0, 128, (2, 12))
    prof = layerprof.profile(model, prompt, generate=5, warmup=0, iters=1)
    g = prof.generation
    assert g is not None
    shapes = [(p.name, p.forwards, p.tokens_per_forward) for p in g.phases]
    n = LAYER_GENERATES
    assert shapes == [("encode", n, 24), ("prefill", n, 2), ("decode", 4 * n, 2)]
    encode, decode = g.phase("encode"), g.phase("decode")
    assert encode is not None and decode is not None
    assert encode.layer("encoder.block.0") is not None and encode.layer("decoder") is None
    assert decode.layer("decoder.block.0") is not None and decode.layer("encoder") is None
    assert g.kv_cache is not None
    # self-attention: 2 x heads x d_kv x (decoder tokens - 1) x batch x 4 bytes per layer;
    # cross-attention: the same over the 12 encoded positions, for the 2 decoder layers
    assert g.kv_cache.layers == (2 * 2 * 16 * 5 * 2 * 4,) * 2
    assert g.kv_cache.cross_bytes == 2 * (2 * 2 * 16 * 12 * 2 * 4)
    back = codec.from_dict(json.loads(json.dumps(codec.to_dict(prof))))
    assert back.generation is not None and back.generation.kv_cache == g.kv_cache
    assert "cross-attention" in str(prof.render("console"))


def test_bad_requests_are_one_line() -> None:
    with pytest.raises(UsageError, match="has no generate"):
        layerprof.profile(nn.Linear(4, 4), torch.randn(2, 4), generate=4)
    with pytest.raises(UsageError, match="must be >= 1"):
        layerprof.profile(gpt2(1, 32, 2), torch.randint(0, 128, (1, 4)), generate=0)
    with pytest.raises(UsageError, match="batch x tokens tensor"):
        layerprof.profile(gpt2(1, 32, 2), torch.randn(4), generate=2)


def test_run_generate_from_the_command_line(
    tmp_path: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    from layerprof.cli import main

    monkeypatch.chdir(ROOT)
    out = Path(str(tmp_path)) / "g.json"
    code = main(["run", "--arch", "tests.support.cli_models:tiny_gpt2", "--input",
                 "1x8:int64[0,64)", "--generate", "4", "--warmup", "0", "--iters", "2",
                 "--json", str(out)])  # fmt: skip
    text, err = capsys.readouterr()
    assert code == 0, err
    assert "time to first token" in text and "decode" in text
    doc = json.loads(out.read_text())
    assert doc["generation"]["new_tokens"] == 4 and doc["generation"]["generates"] == 2
    code = main(["run", "--arch", "tests.support.cli_models:tiny_gpt2", "--input",
                 "1x8:int64[0,64)", "--generate", "4", "--ops"])  # fmt: skip
    assert code == 2 and "--generate does not go with --ops" in capsys.readouterr().err


# ---- the Recorder around the user's own generate() or decode loop ----------------------


def test_a_recorder_around_generate_splits_prefill_and_decode() -> None:
    clock = FakeClock(tick_ns=TICK_NS)  # the verdicts below independent of the load
    model = gpt2()
    model.transformer.h[0].mlp = KnownCost(model.transformer.h[0].mlp, clock)
    prompt = torch.randint(0, 128, (1, 12))
    with torch.inference_mode(), layerprof.Recorder(model, clock=clock) as rec:
        for _ in range(2):
            model.generate(prompt, max_new_tokens=5, min_new_tokens=5, do_sample=False,
                           pad_token_id=0)  # fmt: skip
    g = rec.profile().generation
    assert g is not None and g.ttft_ns is None and g.itl_ns is None  # no clean pass here
    assert (g.generates, g.prompt_tokens, g.batch, g.new_tokens) == (2, 12, 1, 10)
    prefill, decode = g.phase("prefill"), g.phase("decode")
    assert prefill is not None and decode is not None
    assert (prefill.forwards, decode.forwards) == (2, 8)
    row_p, row_d = prefill.layer("transformer.h.0.mlp"), decode.layer("transformer.h.0.mlp")
    assert row_p is not None and row_d is not None
    assert PREFILL_S * 1e9 <= row_p.self_ns <= PREFILL_S * 1e9 + 10 * TICK_NS
    assert DECODE_S * 1e9 <= row_d.self_ns <= DECODE_S * 1e9 + 10 * TICK_NS
    assert "recorded in your own loop" in str(rec.profile().render("console"))


def test_a_hand_written_decode_loop_with_a_named_phase() -> None:
    model = ToyLM().eval()
    ids = torch.randint(0, 64, (2, 8))
    rec = layerprof.Recorder(model)
    with torch.no_grad(), rec:
        logits = model(ids)  # prefill
        for step in range(6):
            nxt = logits[:, -1:].argmax(-1)
            if step % 2 == 0:
                with rec.phase("draft"):  # a speculative draft, named by the user
                    model(nxt)
            logits = model(nxt)  # decode
    g = rec.profile().generation
    assert g is not None
    assert [(p.name, p.forwards) for p in g.phases] == [("prefill", 1), ("draft", 3), ("decode", 6)]
    assert g.phase("draft").tokens_per_forward == 2  # type: ignore[union-attr]
    with pytest.raises(UsageError, match="non-empty name"):
        rec.phase("")


def test_a_classifier_over_token_ids_gets_no_generation_section() -> None:
    model = ToyLM().eval()
    with torch.no_grad(), layerprof.Recorder(model) as rec:
        for _ in range(3):
            model(torch.randint(0, 64, (2, 8)))
    assert rec.profile().generation is None


# ---- findings ----------------------------------------------------------------------------


def _with_generation(
    decode: list[tuple[str, float, list[int]]], ttft_ms: float, whole_ms: float
) -> layerprof.Profile:
    """A profile whose generation section holds the given decode rows (path, total ns,
    per-step self ns) over 8 new tokens, and the clean pass's first-token and whole
    times."""
    from dataclasses import replace

    from layerprof.pivot.sections.generation import Generation, Phase, PhaseLayer
    from layerprof.stats import Summary

    model = ToyLM().eval()
    with torch.no_grad(), layerprof.Recorder(model) as rec:
        model(torch.randint(0, 64, (1, 4)))
    rows = tuple(
        PhaseLayer(path, total, float(sorted(own)[len(own) // 2]), Summary.of(own))
        for path, total, own in decode
    )
    g = Generation(
        new_tokens=8, prompt_tokens=4, batch=1, generates=3,
        ttft_ns=[ttft_ms * 1e6] * 3, itl_ns=[(whole_ms - ttft_ms) / 7 * 1e6] * 21,
        generate_ns=[whole_ms * 1e6] * 3, phases=(Phase("decode", 21, 1, rows),),
    )  # fmt: skip
    return replace(rec.profile(), generation=g)


def _titles(prof: layerprof.Profile) -> dict[str, str]:
    from layerprof.analysis.diagnose import diagnose

    return {f.title: f.detail for f in diagnose(prof)}


def test_findings_name_the_phase_and_the_output_projection() -> None:
    steady = [1000] * 21
    prof = _with_generation(
        [("", 3000.0, steady), ("lm_head", 1500.0, [1500] * 21), ("embed", 500.0, [500] * 21)],
        ttft_ms=1.0, whole_ms=9.0,
    )  # fmt: skip
    found = _titles(prof)
    assert "7 decode steps take 88.9% of the generate" in found["decode takes most of the generate"]
    assert (
        "lm_head is 50.0% of a decode step"
        in found["the output projection takes over a third of each decode step"]
    )
    prefill_heavy = _titles(_with_generation([("", 3000.0, steady)], ttft_ms=8.0, whole_ms=9.0))
    assert "the prompt's prefill takes most of the generate" in prefill_heavy


def test_a_decode_layer_is_named_only_where_its_spread_allows() -> None:
    # attn at 40% of the step at the median, but half its steps far lower: the 95 %
    # interval's low end is under 25 %, so nothing is claimed
    wide = [1200] * 11 + [100] * 10
    unsure = _titles(_with_generation([("", 3000.0, [1] * 21), ("h.0.attn", 1.0, wide)], 1, 9))
    assert "one layer dominates each decode step" not in unsure
    sure = _titles(_with_generation([("", 3000.0, [1] * 21), ("h.0.attn", 1.0, [1200] * 21)], 1, 9))
    assert "h.0.attn is 40.0%" in sure["one layer dominates each decode step"]


# ---- diff: prefill and decode apart -------------------------------------------------------


def _generated(ttft_ms: float, itl_ms: float, head_ms: float) -> layerprof.Profile:
    """A profile whose generation section has clean-pass samples with a small known
    jitter, and a decode phase whose lm_head takes ``head_ms`` per step."""
    from dataclasses import replace

    from layerprof.pivot.sections.generation import Generation, Phase, PhaseLayer
    from layerprof.stats import Summary

    jitter = [(i % 5) * 10_000 for i in range(21)]  # 0-40 µs
    model = ToyLM().eval()
    with torch.no_grad(), layerprof.Recorder(model) as rec:
        model(torch.randint(0, 64, (1, 4)))
    head = [round(head_ms * 1e6) + j for j in jitter]
    g = Generation(
        new_tokens=8, prompt_tokens=4, batch=1, generates=9,
        ttft_ns=[ttft_ms * 1e6 + j for j in jitter[:9]],
        itl_ns=[itl_ms * 1e6 + j for j in jitter],
        generate_ns=[(ttft_ms + 7 * itl_ms) * 1e6 + j for j in jitter[:9]],
        phases=(
            Phase("decode", 21, 1, (PhaseLayer("lm_head", head_ms * 1e6, head_ms * 1e6,
                                               Summary.of(head)),)),
        ),
    )  # fmt: skip
    return replace(rec.profile(), generation=g)


def test_diff_compares_prefill_and_decode_apart(tmp_path: object) -> None:
    """Decode 60 % slower while prefill is 40 % faster: not "no change", but mixed, and
    the gate fails on the decode's inter-token latency and its lm_head (a single-run
    comparison gates above the 50 % drift allowance)."""
    from pathlib import Path

    from layerprof.analysis.diff import diff

    base = _generated(ttft_ms=10.0, itl_ms=2.0, head_ms=1.0)
    new = _generated(ttft_ms=6.0, itl_ms=3.2, head_ms=1.6)
    d = diff(base, new)
    rows = {r.label: r.change.status for r in d.changed_phases()}
    assert rows == {
        "prefill: time to first token": "faster",
        "decode: inter-token latency": "slower",
        "decode: lm_head": "slower",
    }
    assert d.verdict == "mixed"
    gate = layerprof.gate(d, 5.0)
    assert gate.failed
    assert any(r.startswith("decode: inter-token latency") for r in gate.reasons)
    assert any(r.startswith("decode: lm_head self time") for r in gate.reasons)
    assert not layerprof.gate(d, 5.0, "ops").failed
    text = str(d.render("console"))
    assert "Generation (prefill and decode apart)" in text and "inter-token latency" in text
    assert "| `decode: lm_head` |" in d.to_markdown()
    assert 'id="diff-phases"' in str(d.render("html"))
    out = Path(str(tmp_path)) / "d.json"
    d.save(out)
    again = codec.load(out)
    assert again.phases == d.phases  # type: ignore[union-attr]
    one_sided = diff(base, replace_generation(new))
    assert any("no generation section" in w for w in one_sided.warnings)


def replace_generation(p: layerprof.Profile) -> layerprof.Profile:
    from dataclasses import replace

    return replace(p, generation=None)


# ---- roofline per phase ------------------------------------------------------------------


def test_each_phase_counts_its_own_work(profiled: layerprof.Profile) -> None:
    """A Linear's FLOPs per forward: 2 x tokens x in x out, over the prompt's 2 x 16 tokens
    in prefill and the batch's 2 tokens in decode; the same weights read, so decode's
    FLOP per byte is far lower (prefill and decode on opposite sides of a ridge)."""
    from layerprof.pivot.sections.flops import Peak

    g = profiled.generation
    assert g is not None and g.peak is not None
    prefill, decode = g.phase("prefill"), g.phase("decode")
    assert prefill is not None and decode is not None
    pre, dec = prefill.layer("transformer.h.1.mlp.c_fc"), decode.layer("transformer.h.1.mlp.c_fc")
    assert pre is not None and dec is not None
    assert pre.flops == 2 * 32 * 64 * 256 and dec.flops == 2 * 2 * 64 * 256
    assert pre.bytes is not None and dec.bytes is not None and dec.bytes < pre.bytes
    assert pre.intensity is not None and dec.intensity is not None
    assert pre.intensity > 8 * dec.intensity
    ridge = (pre.intensity * dec.intensity) ** 0.5  # between the two
    peak = Peak(flops_per_s=ridge * 1e10, bytes_per_s=1e10, source="given")
    assert (pre.bound(peak), dec.bound(peak)) == ("compute", "memory")
    assert pre.rate is not None and pre.rate == pytest.approx(pre.flops / pre.total_ns * 1e9)
    text = str(profiled.render("console"))
    assert "work per forward of each phase" in text and "roofline against" in text
    back = codec.from_dict(json.loads(json.dumps(codec.to_dict(profiled))))
    again = back.generation.phase("decode").layer("transformer.h.1.mlp.c_fc")  # type: ignore[union-attr]
    assert again is not None and (again.flops, again.bytes) == (dec.flops, dec.bytes)
    assert back.generation.peak == g.peak  # type: ignore[union-attr]
    assert 'id="lp-generation-work"' in str(profiled.render("html"))


def test_a_decode_far_below_the_bandwidth_roof_is_named() -> None:
    from dataclasses import replace

    from layerprof.pivot.sections.flops import Peak
    from layerprof.pivot.sections.generation import Phase, PhaseLayer

    prof = _with_generation([("", 3000.0, [1000] * 21)], ttft_ms=1, whole_ms=9)
    g = prof.generation
    assert g is not None

    def with_root(bytes_moved: int, total_ns: float) -> layerprof.Profile:
        root = PhaseLayer("", total_ns, total_ns, None, None, flops=bytes_moved // 10,
                          bytes=bytes_moved)  # fmt: skip
        phase = Phase("decode", 21, 1, (root,))
        peak = Peak(flops_per_s=1e12, bytes_per_s=1e11, source="given")
        return replace(prof, generation=replace(g, phases=(phase,), peak=peak))

    # 1 MB in 1 ms = 1 GB/s, 1 % of a 100 GB/s roof (10 µs at the roof)
    found = _titles(with_root(1_000_000, 1e6))
    assert "1.0% of the device's" in found["decode steps run far below the memory bandwidth roof"]
    # 50 MB in 1 ms = 50 GB/s: half the roof, memory-bound as it should be
    assert "decode steps run far below the memory bandwidth roof" not in _titles(
        with_root(50_000_000, 1e6)
    )


@pytest.mark.slow
@pytest.mark.usefixtures("inductor_dir")
def test_a_compiled_decoder_generates_as_one_row_per_phase() -> None:
    """``m.compile()`` (compiled in place): the layers inside the compiled region run as
    fused kernels, so each phase has the model as one row, said by a note; the clean
    pass's first-token and inter-token times are the compiled ones."""
    model = gpt2(1, 32, 2)
    model.compile()
    prof = layerprof.profile(model, torch.randint(0, 128, (1, 8)), generate=4, warmup=1, iters=2)
    g = prof.generation
    assert g is not None and g.ttft_ns is not None and g.itl_ns is not None
    assert [(p.name, [x.path for x in p.layers]) for p in g.phases] == [
        ("prefill", [""]), ("decode", [""]),
    ]  # fmt: skip
    assert "compiled-leaves" in {n.kind for n in prof.notes}


class Allocating(nn.Module):
    """Moves a fake CUDA allocator as a decoder layer would: a transient workspace of
    1,000 bytes per token of the forward and 10 bytes per token kept (a cache)."""

    def __init__(self, inner: nn.Module, allocator: object) -> None:
        super().__init__()
        self.inner, self.allocator = inner, allocator

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.shape[1]
        self.allocator.alloc(10 * tokens)  # type: ignore[attr-defined]
        self.allocator.alloc(1000 * tokens)  # type: ignore[attr-defined]
        out: torch.Tensor = self.inner(x)
        self.allocator.free(1000 * tokens)  # type: ignore[attr-defined]
        return out


def test_each_phase_has_its_allocator_peak_through_the_counter_interface() -> None:
    """The CUDA path on a fake allocator: the peak above the start up to the first token
    (the prompt's workspace) and after it (one token's, over a growing cache)."""
    from layerprof.capture.generate import profile_generate
    from tests.support.fake_allocator import FakeAllocator

    allocator = FakeAllocator()
    model = gpt2(1, 32, 2)
    model.transformer.h[0].mlp = Allocating(model.transformer.h[0].mlp, allocator)
    prompt = torch.randint(0, 128, (1, 16))
    prof = profile_generate(model, (prompt,), {}, 4, warmup=0, iters=1, counter=allocator)
    g = prof.generation
    assert g is not None
    # prefill: 16 tokens kept + 16,000 of workspace; decode: 3 more steps of 10 kept and
    # 1,000 of workspace each, above the 160 the prefill left
    assert dict(g.peak_bytes) == {"prefill": 160 + 16_000, "decode": 160 + 30 + 1_000}
    assert "peak memory above the start: prefill 15.8 KiB" in str(prof.render("console"))
    back = codec.from_dict(json.loads(json.dumps(codec.to_dict(prof))))
    assert back.generation is not None and back.generation.peak_bytes == g.peak_bytes


def test_a_decode_step_splits_into_forward_and_around_it(profiled: layerprof.Profile) -> None:
    """The clean pass's inter-token latency less the decode forward's total: what
    generate() does between forwards (logits processing, sampling, the cache)."""
    g = profiled.generation
    assert g is not None and g.itl_ns is not None
    decode = g.phase("decode")
    assert decode is not None
    root = decode.layer("")
    assert root is not None and g.decode_outside_ns == g.itl_ns.median - root.total_ns
    by_token = g.itl_by_token()
    assert len(by_token) == 5 and all(t >= DECODE_S * 1e9 for t in by_token)
    text = str(profiled.render("console"))
    assert "a decode step:" in text and "inter-token latency" in text
    page = str(profiled.render("html"))
    assert '"lp-itl":{"kind":"steps"' in page and '"lp-phases":{"kind":"bars"' in page


def test_a_generate_runs_in_the_threads_asked_for_and_puts_them_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``threads=`` reaches the generate passes (it was dropped on the way), torch's count
    is restored after, and a count torch would crash on is one line."""
    seen: list[int] = []
    model = gpt2(1, 32, 2)
    real = model.generate

    def generate(*args: object, **kwargs: object) -> object:
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "generate", generate)
    before = torch.get_num_threads()
    target = 2 if before != 2 else 1
    layerprof.profile(model, torch.randint(0, 128, (1, 4)), generate=2, warmup=0, iters=1,
                      threads=target)  # fmt: skip
    assert seen and set(seen) == {target} and torch.get_num_threads() == before
    with pytest.raises(UsageError, match="threads: 100000 threads is more than"):
        layerprof.profile(model, torch.randint(0, 128, (1, 4)), generate=2, threads=100_000)
