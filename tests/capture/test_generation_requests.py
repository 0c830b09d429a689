"""What profile(..., generate=N) and run --generate take and refuse (issue 43, items 6, 8,
9, 10): Llama 3's list of end tokens, a model's own error named by its layer, a generate
past the position table, options refused in one line or honoured, and what the profile
says of its run (dtype, threads, calls per generate). Tiny HF models built from configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerprof
from layerprof.capture.generate import LAYER_GENERATES
from layerprof.errors import ModelRunError, UsageError
from tests.support.cli_models import FailsOnDecode
from tests.support.paths import ROOT

transformers = pytest.importorskip("transformers")


def gpt2(positions: int = 64) -> nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=positions
    )
    return transformers.GPT2LMHeadModel(config).eval()


def llama3(positions: int = 64) -> nn.Module:
    """Llama 3's generation config: two end-of-sequence tokens and no pad token."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=64, max_position_embeddings=positions,
        eos_token_id=[1, 2], pad_token_id=None,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


def prompt(tokens: int = 6) -> torch.Tensor:
    return torch.randint(3, 64, (1, tokens))


def hooked(model: nn.Module) -> bool:
    """Whether anything layerprof puts on a model is still there."""
    return any(
        m._forward_hooks or m._forward_pre_hooks or "forward" in vars(m) for m in model.modules()
    )


# ---- item 8: Llama 3 --------------------------------------------------------------------


def test_llama3_with_a_list_of_end_tokens_and_no_pad_token_generates() -> None:
    model = llama3()
    assert model.generation_config.eos_token_id == [1, 2]
    assert model.generation_config.pad_token_id is None
    prof = layerprof.profile(model, prompt(), generate=3, warmup=0, iters=1)
    g = prof.generation
    assert g is not None and g.new_tokens == 3
    assert [(p.name, p.forwards) for p in g.phases] == [
        ("prefill", LAYER_GENERATES), ("decode", 2 * LAYER_GENERATES),
    ]  # fmt: skip


# ---- item 9: a model's own error, a generate past the position table --------------------


def test_a_models_own_error_in_a_decode_step_names_the_layer() -> None:
    model = gpt2()
    model.transformer.h[1].mlp = FailsOnDecode(model.transformer.h[1].mlp)
    with pytest.raises(ModelRunError) as caught:
        layerprof.profile(model, prompt(), generate=3, warmup=0, iters=1)
    assert caught.value.layer == "transformer.h.1.mlp"
    assert str(caught.value).startswith("transformer.h.1.mlp (FailsOnDecode): mat1 and mat2")
    assert not hooked(model) and not model.training


@pytest.mark.parametrize("make", [gpt2, llama3])
def test_a_generate_past_the_position_table_is_refused_before_it_runs(make: Any) -> None:
    """GPT-2's learned table raised IndexError past it; a rotary Llama ran on."""
    model = make(positions=16)
    ran: list[int] = []
    model.register_forward_pre_hook(lambda m, a: ran.append(1))
    with pytest.raises(UsageError) as caught:
        layerprof.profile(model, prompt(10), generate=7, warmup=0, iters=1)
    assert str(caught.value) == (
        "generate=7: a 10-token prompt and 7 new tokens need 17 positions, more than the"
        " model's max_position_embeddings (16)"
    )
    assert caught.value.hint == "generate at most 6 new tokens after this prompt"
    assert ran == []  # refused before the first forward
    prof = layerprof.profile(model, prompt(10), generate=6, warmup=0, iters=1)  # the most
    assert prof.generation is not None and prof.generation.new_tokens == 6


def test_run_names_the_layer_and_refuses_a_long_generate_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from layerprof.cli import main

    monkeypatch.chdir(ROOT)
    base = ["run", "--input", "1x8:int64[3,64)", "--warmup", "0", "--iters", "1"]
    code = main([*base, "--arch", "tests.support.cli_models:tiny_gpt2_failing_decode",
                 "--generate", "3"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err  # a model's error, not 3 ("internal error ... report it")
    assert "internal error" not in err and "transformer.h.1.mlp (FailsOnDecode)" in err
    code = main([*base, "--arch", "tests.support.cli_models:tiny_gpt2", "--generate", "60"])
    err = capsys.readouterr().err
    assert code == 2 and "max_position_embeddings (64)" in err and "Traceback" not in err


# ---- item 10: options refused in one line, or honoured -----------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ops": True}, "generate= does not go with ops="),
        ({"backward": True}, "generate= does not go with backward=True"),
        ({"compile": True}, "generate= does not go with compile="),
        ({"eval": False}, "generate= does not go with eval=False"),
        ({"grad": True}, "generate= does not go with grad=True"),
        ({"peak": 5}, "peak must be FLOPS"),
        ({"peak": "fast"}, "--peak"),
        ({"iters": 0}, "iters must be at least 1"),
        ({"iters": -5}, "iters must be at least 1"),
        ({"iters": 2.5}, "iters must be a whole number"),
        ({"warmup": "1"}, "warmup must be a whole number"),
        ({"warmup": -1}, "warmup cannot be negative"),
    ],
)
def test_the_api_refuses_what_a_generate_would_ignore(
    options: dict[str, Any], message: str
) -> None:
    model = gpt2()
    with pytest.raises(UsageError, match=message.replace("(", r"\(")) as caught:
        layerprof.profile(model, prompt(), generate=2, **options)
    assert "\n" not in str(caught.value)
    assert not hooked(model)


def test_profile_generate_itself_checks_its_counts() -> None:
    """sweep calls profile_generate directly: its counts are checked there too."""
    from layerprof.capture.generate import profile_generate

    for warmup, iters in ((0, 0), ("1", 1), (0, 2.5)):
        with pytest.raises(UsageError, match=r"warmup|iters"):
            profile_generate(gpt2(), (prompt(),), {}, 2, warmup=warmup, iters=iters)  # type: ignore[arg-type]


class GradProbe(nn.Module):
    """Records the grad mode each forward ran in."""

    def __init__(self, inner: nn.Module, seen: list[tuple[bool, bool]]) -> None:
        super().__init__()
        self.inner, self.seen = inner, seen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
        out: torch.Tensor = self.inner(x)
        return out


def test_the_api_honours_peak_correction_and_the_grad_mode() -> None:
    seen: list[tuple[bool, bool]] = []
    model = gpt2()
    model.transformer.h[0].mlp = GradProbe(model.transformer.h[0].mlp, seen)
    prof = layerprof.profile(
        model, prompt(), generate=2, warmup=0, iters=1, peak="1T,10G",
        correct_overhead=False, inference_mode=False,
    )  # fmt: skip
    g = prof.generation
    assert g is not None and g.peak is not None
    assert (g.peak.flops_per_s, g.peak.bytes_per_s, g.peak.source) == (1e12, 1e10, "given")
    assert prof.overhead is None or not prof.overhead.corrected  # nothing removed
    assert seen and not any(inference for inference, _ in seen)  # torch.no_grad() instead
    assert not any(grad for _, grad in seen)
    seen.clear()
    layerprof.profile(model, prompt(), generate=2, warmup=0, iters=1)
    assert seen and all(inference for inference, _ in seen)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (["--train"], "--generate does not go with --train: generate() is inference"),
        (["--grad"], "--generate does not go with --grad"),
        (["--backward"], "--generate does not go with --backward"),
        (["--compile"], "--generate does not go with --compile"),
        (["--iters", "0"], "argument --iters: 0 is below 1"),
    ],
)
def test_run_refuses_what_a_generate_would_ignore(
    flag: list[str], message: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from layerprof.cli import main

    monkeypatch.chdir(ROOT)
    code = main(["run", "--arch", "tests.support.cli_models:tiny_gpt2", "--input",
                 "1x8:int64[0,64)", "--generate", "2", "--warmup", "0", *flag])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "Traceback" not in err


# ---- item 6: what the profile says of its run --------------------------------------------


def test_run_honours_peak_no_correct_and_dtype_and_says_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--dtype bfloat16 ran in bf16 but was saved as float32, and threads as unknown;
    --peak and --no-correct were dropped."""
    from layerprof.cli import main

    monkeypatch.chdir(ROOT)
    out = tmp_path / "g.json"
    code = main(["run", "--arch", "tests.support.cli_models:tiny_gpt2", "--input",
                 "1x8:int64[0,64)", "--generate", "2", "--warmup", "0", "--iters", "1",
                 "--dtype", "bfloat16", "--threads", "1", "--peak", "2T,50G", "--no-correct",
                 "--no-inference-mode", "--json", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    meta = doc["meta"]
    assert (meta["dtype"], meta["threads"], meta["source"]) == ("bfloat16", 1, "layerprof.generate")
    assert meta["model"] == "GPT2LMHeadModel" and "cpus" in meta["extra"]
    peak = doc["generation"]["peak"]
    assert (peak["flops_per_s"], peak["bytes_per_s"], peak["source"]) == (2e12, 5e10, "given")
    assert doc.get("overhead") is None or not doc["overhead"]["corrected"]


def test_the_layer_table_counts_calls_per_forward_of_the_model() -> None:
    """T5's encoder runs apart from the model's forward: as an iteration of its own its
    root read 0.97 calls (5 / 6 here). Folded into the next forward, the root has 1 call
    per forward, and the encoder one per generate, 1/5 per forward, its time in the
    prefill's forward."""
    torch.manual_seed(0)
    config = transformers.T5Config(
        d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=64,
        decoder_start_token_id=0,
    )  # fmt: skip
    model = transformers.T5ForConditionalGeneration(config).eval()
    prof = layerprof.profile(model, prompt(), generate=5, warmup=0, iters=1)
    calls = {r.path: r.calls for r in prof.rows()}
    assert calls[""] == 1 and calls["decoder"] == 1 and calls["lm_head"] == 1
    assert calls["encoder"] == pytest.approx(0.2) and calls["encoder.block.0"] == pytest.approx(0.2)
    root, encoder = prof.samples[""], prof.samples["encoder"]
    assert root.total_ns.values is not None and encoder.total_ns.values is not None
    assert len(root.total_ns.values) == LAYER_GENERATES * 5  # one per forward of the model
    ran = [i for i, t in enumerate(encoder.total_ns.values.tolist()) if t > 0]
    assert ran == [0, 5, 10]  # in each generate's first forward, the prefill
    assert not root.calls_vary and encoder.calls_vary
    assert prof.overhead is None or prof.overhead.calls_per_forward > 10
    assert any("the encoder, which generate() runs" in n.text for n in prof.notes)
    shared = [n for n in prof.notes if n.kind == "shared-module"]
    assert [n.data["path"] for n in shared] == ["shared"]  # 0 calls, and says why
    ran_as = shared[0].data["ran_as"]  # its tied weight: the embeddings' and the head's
    assert set(ran_as) == {"encoder.embed_tokens", "decoder.embed_tokens", "lm_head"}
    assert calls[
        "shared"
    ] == 0 and "shared did not run itself: its module or weights ran as" in str(
        prof.render("console")
    )
    page = str(prof.render("html"))
    assert "Recorded in your own loop" not in page
    assert "timed the first token and the gaps between tokens" in page


def test_the_recorders_profile_says_its_dtype_and_threads() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).to(torch.bfloat16)
    with torch.no_grad(), layerprof.Recorder(model) as rec:
        model(torch.randn(2, 4, dtype=torch.bfloat16))
    meta = rec.profile().meta
    assert (meta.dtype, meta.threads) == ("bfloat16", torch.get_num_threads())
