"""One rule for a forward's generate phase and one assembly of the generation section,
shared by the Recorder, ``--generate`` and a trace (issue 45, item 2). They disagreed: a
one-token prompt (a lone BOS) was decode for the Recorder and the trace and prefill for
``--generate``. The rule kept is ``--generate``'s: a generate's first forward takes the
prompt, whatever its length, so it is the prefill. The trace's test is in
tests/trace/test_trace_generation.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import layerprof
from layerprof.capture.generate import LAYER_GENERATES
from layerprof.pivot.records import LayerSamples
from layerprof.pivot.sections.generation import (
    DECODE,
    PREFILL,
    assemble_generation,
    forward_phase,
    is_generation,
    tag_forwards,
    token_ids,
)
from layerprof.render.generation_text import phase_table
from tests.support.zoo_models import ToyLM

# ---- the rule, as a pure function ---------------------------------------------------


def test_token_ids_are_a_batch_by_tokens_integer_tensor() -> None:
    assert token_ids((2, 7), True) == (7, 2)
    assert token_ids((2, 7), False) is None  # floats: no token ids
    assert token_ids((2, 7, 3), True) is None and token_ids(None, True) is None


def test_a_generates_first_forward_is_its_prefill_whatever_its_length() -> None:
    assert forward_phase(None, (1, 2), prefilled=False) == (PREFILL, 1, 2)
    assert forward_phase(None, (1, 2), prefilled=True) == (DECODE, 1, 2)
    assert forward_phase(None, (9, 2), prefilled=True) == (PREFILL, 9, 2)
    assert forward_phase("draft", (1, 2), prefilled=True) == ("draft", 1, 2)  # named wins
    assert forward_phase("draft", None, prefilled=True) == ("draft", 0, 0)
    assert forward_phase(None, None, prefilled=False) is None


def test_tagging_in_order_restarts_at_each_generate() -> None:
    bos, step, untagged = (None, (1, 1)), (None, (1, 1)), None
    tags = tag_forwards([bos, step, step, untagged, bos, step], starts={4})
    assert [t[0] if t else None for t in tags] == [
        PREFILL, DECODE, DECODE, None, PREFILL, DECODE,
    ]  # fmt: skip
    # without the start the second generate's one-token prompt cannot be told apart
    again = tag_forwards([bos, step, bos, step])
    assert [t[0] if t else None for t in again] == [PREFILL, DECODE, DECODE, DECODE]
    # a named prefill or decode puts the prefill behind; a named draft does not
    named = tag_forwards([("draft", (1, 1)), bos, ("decode", None), step])
    assert [t[0] if t else None for t in named] == ["draft", PREFILL, DECODE, DECODE]
    assert not is_generation([(PREFILL, 8, 2), None, (PREFILL, 8, 2)])  # a classifier
    assert is_generation([(PREFILL, 1, 1), (DECODE, 1, 1)]) and is_generation([("draft", 0, 0)])


def test_the_assembly_counts_from_the_tags_and_grows_with_the_position() -> None:
    """Per-iteration samples of two layers: ``attn`` costs 1,000 ns per context position
    in decode, ``mlp`` a flat 500; the growth slope is read against the positions."""
    tags = [(PREFILL, 4, 2), (DECODE, 1, 2), (DECODE, 1, 2), (DECODE, 1, 2), None]
    positions = [4, 5, 6, 7, 0]  # what each forward reaches (the last: no phase)
    attn = [1_000 * p for p in positions]
    samples = {
        "": LayerSamples([a + 500 for a in attn], [0] * 5, 1.0),
        "attn": LayerSamples(attn, attn, 1.0),
        "mlp": LayerSamples([500] * 5, [500] * 5, 1.0),
    }
    g = assemble_generation(samples, tags)
    assert (g.new_tokens, g.prompt_tokens, g.batch, g.generates) == (4, 4, 2, 1)
    assert g.ttft_ns is None and g.itl_ns is None and g.generate_ns is None
    assert [(p.name, p.forwards, p.tokens_per_forward) for p in g.phases] == [
        (PREFILL, 1, 8), (DECODE, 3, 2),
    ]  # fmt: skip
    decode = g.phase(DECODE)
    assert decode is not None
    assert decode.layer("attn").growth_ns_per_1k == pytest.approx(1_000_000)  # type: ignore[union-attr]
    assert decode.layer("mlp").growth_ns_per_1k == pytest.approx(0, abs=1e-6)  # type: ignore[union-attr]


# ---- the Recorder and --generate ----------------------------------------------------


def test_a_recorded_decode_loop_from_a_one_token_prompt_starts_with_its_prefill() -> None:
    model = ToyLM().eval()
    bos = torch.zeros(2, 1, dtype=torch.long)
    with torch.no_grad(), layerprof.Recorder(model) as rec:
        logits = model(bos)
        for _ in range(3):
            logits = model(logits[:, -1:].argmax(-1))
    g = rec.profile(correct=False).generation
    assert g is not None
    assert [(p.name, p.forwards, p.tokens_per_forward) for p in g.phases] == [
        (PREFILL, 1, 2), (DECODE, 3, 2),
    ]  # fmt: skip
    assert (g.generates, g.prompt_tokens, g.new_tokens) == (1, 1, 4)


def test_named_phases_place_the_prefill_where_ids_cannot() -> None:
    """What docs/definitions.md tells a user: a record that starts after its prefill names
    its first step decode, and a later generate's one-token prompt is named prefill."""
    model = ToyLM().eval()
    one = torch.zeros(1, 1, dtype=torch.long)
    with torch.no_grad(), layerprof.Recorder(model) as rec:
        with rec.phase("decode"):
            model(one)
        model(one)
        with rec.phase("prefill"):
            model(one)
        model(one)
    g = rec.profile(correct=False).generation
    assert g is not None
    assert [(p.name, p.forwards) for p in g.phases] == [(DECODE, 3), (PREFILL, 1)]
    assert g.generates == 1


transformers = pytest.importorskip("transformers")


def _gpt2() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=64)
    return transformers.GPT2LMHeadModel(config).eval()


def test_generate_from_a_one_token_prompt_has_one_prefill_per_generate() -> None:
    """Each of the per-layer pass's generates begins on the Recorder: its one-token
    prefill is not read as a decode step (ids alone cannot tell the two apart)."""
    prof = layerprof.profile(_gpt2(), torch.zeros(2, 1, dtype=torch.long), generate=4,
                             warmup=0, iters=1)  # fmt: skip
    g = prof.generation
    assert g is not None
    assert [(p.name, p.forwards, p.tokens_per_forward) for p in g.phases] == [
        (PREFILL, LAYER_GENERATES, 2), (DECODE, 3 * LAYER_GENERATES, 2),
    ]  # fmt: skip
    assert (g.new_tokens, g.prompt_tokens, g.batch, g.generates) == (4, 1, 2, 1)
    assert g.ttft_ns is not None and g.itl_ns is not None and g.itl_ns.n == 3


def test_a_recorder_around_t5_generate_has_a_prefill_per_generate() -> None:
    """T5's forwards take ``decoder_input_ids`` (one start token, then one per step); the
    encoder that generate() runs first begins each generate."""
    torch.manual_seed(0)
    config = transformers.T5Config(
        d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16, vocab_size=128,
        decoder_start_token_id=0,
    )  # fmt: skip
    model = transformers.T5ForConditionalGeneration(config).eval()
    prompt = torch.randint(0, 128, (2, 12))
    with torch.inference_mode(), layerprof.Recorder(model) as rec:
        for _ in range(2):
            model.generate(prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    g = rec.profile(correct=False).generation
    assert g is not None
    # the encoder's tokens are not seen by the Recorder (its call is not the model's)
    assert [(p.name, p.forwards, p.tokens_per_forward) for p in g.phases] == [
        ("encode", 2, 0), (PREFILL, 2, 2), (DECODE, 6, 2),
    ]  # fmt: skip
    assert g.phase("encode").layer("encoder") is not None  # type: ignore[union-attr]
    assert g.phase(DECODE).layer("encoder") is None  # type: ignore[union-attr]
    # the table says the encoder's tokens are unknown rather than 0
    rows = {row[0]: row for row in phase_table(g, "T5ForConditionalGeneration")}
    assert (rows["encode"][2], rows[PREFILL][2], rows[DECODE][2]) == ("-", "2", "2")
