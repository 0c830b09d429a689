"""``analyze`` of a torch.profiler trace of a ``generate()``: prefill and decode apart,
from the token ids each forward's embedding took or the user's record_function marks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

import layerprof
from layerprof import codec

transformers = pytest.importorskip("transformers")


def _gpt2() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=64)
    return transformers.GPT2LMHeadModel(config).eval()


def _trace(tmp_path: Path, model: nn.Module, run: object, **options: bool) -> Path:
    with torch.inference_mode():
        run()  # type: ignore[operator]  # warm
        with profile(activities=[ProfilerActivity.CPU], **options) as prof:
            run()  # type: ignore[operator]
    out = tmp_path / "generate.json"
    prof.export_chrome_trace(str(out))
    return out


def test_a_generate_trace_splits_into_prefill_and_decode(tmp_path: Path) -> None:
    model = _gpt2()
    prompt = torch.randint(0, 128, (2, 10))

    def run() -> None:
        for _ in range(2):
            model.generate(prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False,
                           pad_token_id=0)  # fmt: skip

    path = _trace(tmp_path, model, run, with_stack=True, record_shapes=True)
    prof = layerprof.analyze(path).ranks[0]
    g = prof.generation
    assert g is not None
    assert (g.generates, g.prompt_tokens, g.batch, g.ttft_ns) == (2, 10, 2, None)
    shapes = [(p.name, p.forwards, p.tokens_per_forward) for p in g.phases]
    assert shapes == [("prefill", 2, 20), ("decode", 6, 2)]
    assert g.itl_ns is not None and g.itl_ns.n == 6  # each decode forward after another
    decode = g.phase("decode")
    assert decode is not None and decode.layer("GPT2LMHeadModel") is not None
    text = str(prof.render("console"))
    assert "from the trace's forwards" in text and "Decode self" in text
    back = codec.from_dict(codec.to_dict(prof))
    assert back.generation is not None
    assert [(p.name, p.forwards, [x.path for x in p.layers]) for p in back.generation.phases] == [
        (p.name, p.forwards, [x.path for x in p.layers]) for p in g.phases
    ]


def test_record_function_marks_name_the_phases(tmp_path: Path) -> None:
    """A hand-written decode loop marked by the user, no shapes recorded."""
    model = _gpt2()
    ids = torch.randint(0, 128, (1, 6))

    def run() -> None:
        with record_function("prefill"):
            out = model(ids, use_cache=True)
        cache = out.past_key_values
        for _ in range(3):
            nxt = out.logits[:, -1:].argmax(-1)
            with record_function("decode"):
                out = model(nxt, past_key_values=cache, use_cache=True)
            cache = out.past_key_values

    prof = layerprof.analyze(_trace(tmp_path, model, run)).ranks[0]
    g = prof.generation
    assert g is not None
    assert [(p.name, p.forwards) for p in g.phases] == [("prefill", 1), ("decode", 3)]


def test_a_trace_of_steps_that_are_not_forwards_gets_no_generation(tmp_path: Path) -> None:
    """prof.step() once per generate: a step holds the prefill and its decode steps, and
    cannot be split; no shapes and no marks: nothing to tell the phases by."""
    model = _gpt2()
    prompt = torch.randint(0, 128, (1, 8))

    def run() -> None:
        model.generate(prompt, max_new_tokens=3, min_new_tokens=3, do_sample=False,
                       pad_token_id=0)  # fmt: skip

    assert layerprof.analyze(_trace(tmp_path, model, run)).ranks[0].generation is None
    with (
        torch.inference_mode(),
        profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof,
    ):
        for _ in range(3):
            run()
            prof.step()
    out = tmp_path / "stepped.json"
    prof.export_chrome_trace(str(out))
    assert layerprof.analyze(out).ranks[0].generation is None


def test_a_one_token_prompt_is_the_traces_prefill(tmp_path: Path) -> None:
    """A generate from a lone start token: every forward's ids are one token, and the first
    is the prefill (it took the prompt), as the Recorder and --generate decide it; it was
    read as a decode step, with no prefill at all (issue 45, item 2)."""
    model = _gpt2()
    prompt = torch.zeros(2, 1, dtype=torch.long)

    def run() -> None:
        model.generate(prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False,
                       pad_token_id=0)  # fmt: skip

    path = _trace(tmp_path, model, run, with_stack=True, record_shapes=True)
    g = layerprof.analyze(path).ranks[0].generation
    assert g is not None
    assert [(p.name, p.forwards, p.tokens_per_forward) for p in g.phases] == [
        ("prefill", 1, 2), ("decode", 3, 2),
    ]  # fmt: skip
    assert (g.generates, g.prompt_tokens, g.batch) == (1, 1, 2)
    assert g.itl_ns is not None and g.itl_ns.n == 3
