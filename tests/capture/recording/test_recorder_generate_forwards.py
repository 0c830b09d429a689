"""A Recorder around the user's own T5 ``generate()``: generate() runs the encoder
outside the model's forward, which read as an iteration of its own, so the root showed
below 1 call (0.97). As with ``--generate``, the encoder's call is counted in the next
forward: the root has 1 call per forward and the encoder 1/N (issue 43, item 6)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from layerprof import Recorder

transformers = pytest.importorskip("transformers")

NEW = 5


def _t5() -> tuple[object, torch.Tensor]:
    torch.manual_seed(0)
    config = transformers.T5Config(
        d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16, vocab_size=128,
        decoder_start_token_id=0,
    )  # fmt: skip
    return transformers.T5ForConditionalGeneration(config).eval(), torch.randint(0, 128, (2, 12))


def test_recorder_around_t5_generate_counts_per_forward() -> None:
    model, prompt = _t5()
    with torch.inference_mode(), Recorder(model) as rec:  # type: ignore[arg-type]
        for _ in range(2):
            model.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)  # type: ignore[attr-defined]
    prof = rec.profile(correct=False)
    assert prof.row("").calls == 1
    assert prof.row("encoder").calls == pytest.approx(1 / NEW)
    assert prof.row("decoder").calls == 1
    assert prof.row("encoder").calls_vary and not prof.row("").calls_vary
    assert any(n.kind == "generation-per-forward" for n in prof.notes)
    # the record itself keeps the encoder's call as an iteration of its own
    raw = rec.profile_per_iteration(correct=False)
    assert raw.row("").calls == pytest.approx(2 * NEW / (2 * NEW + 2))


def test_recorder_around_a_decoder_only_model_is_unchanged() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with Recorder(model) as rec:
        for _ in range(3):
            model(torch.randn(2, 4))
        model[0](torch.randn(2, 4))  # a submodule called alone stays an iteration
    prof = rec.profile(correct=False)
    assert prof.row("").calls == pytest.approx(3 / 4)
    assert not any(n.kind == "generation-per-forward" for n in prof.notes)
