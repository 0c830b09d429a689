"""What a Recorder keeps per forward to tell a generate's phases apart (issue 43, item 12):
a forward of a token-id model cost ~130-175 bytes in ``Recorder._tags`` (a dict of
tuples), also under ``rec.stream(n)``, where no generation section is made; the budget
is 24 bytes a recorded call."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
import torch
from torch import nn

import layerprof
from layerprof.capture.recording.phasetags import PhaseTags

FORWARDS = 2000
BUDGET = 24  # bytes a recorded call (README, "Memory bound")


class Pair(nn.Module):
    """Two layers over a (batch, tokens) input: token ids or floats, the same calls."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.out = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.out(self.fc(x.float()))
        return out


def bytes_per_forward(ids: bool, *, stream: bool) -> float:
    """Python memory a Recorder holds after ``FORWARDS`` more forwards, per forward."""
    torch.manual_seed(0)
    model = Pair()
    x = torch.zeros(1, 8, dtype=torch.long if ids else torch.float32)
    with torch.no_grad(), layerprof.Recorder(model) as rec:
        if stream:
            rec.stream(FORWARDS + 10)
        for _ in range(10):  # shapes, torch's first-call caches
            model(x)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(FORWARDS):
                model(x)
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
    return (after - before) / FORWARDS


@pytest.mark.parametrize("stream", [False, True])
def test_token_ids_cost_at_most_the_budget_per_forward(stream: bool) -> None:
    """Token ids against floats through the same layers: the same log, so the difference
    is what tagging keeps (tracemalloc counts allocations, not time: deterministic)."""
    extra = bytes_per_forward(True, stream=stream) - bytes_per_forward(False, stream=stream)
    if stream:
        assert extra < 2, extra  # streamed: no generation section, no tags (was ~130)
    else:
        assert 0 < extra <= BUDGET, extra  # 20 bytes of arrays (was ~130)


def test_a_streamed_token_id_record_keeps_no_tags() -> None:
    model = Pair()
    with torch.no_grad(), layerprof.Recorder(model) as rec:
        model(torch.zeros(1, 8, dtype=torch.long))  # tagged before stream(): dropped
        rec.stream(4)
        for _ in range(3):
            model(torch.zeros(1, 8, dtype=torch.long))
        assert len(rec.generate_phases.seen) == 0 and rec.generate_phases.seen.nbytes == 0
    assert rec.profile().generation is None


def test_tags_by_forward_number_with_gaps_and_names() -> None:
    tags = PhaseTags()
    assert tags.get(0) is None and tags.values() == [] and tags.nbytes == 0
    tags.add(3, "prefill", 7, 2)  # forwards 0-2 untagged: nothing held for them
    tags.add(4, "decode", 1, 2)
    tags.add(7, "draft", 0, 0)  # 5, 6 untagged
    tags.add(8, "decode", 1, 2)
    assert tags.nbytes == 6 * 20
    assert [tags.get(k) for k in range(10)] == [
        None, None, None, ("prefill", 7, 2), ("decode", 1, 2), None, None, ("draft", 0, 0),
        ("decode", 1, 2), None,
    ]  # fmt: skip
    assert tags.values() == [("prefill", 7, 2), ("decode", 1, 2), ("draft", 0, 0), ("decode", 1, 2)]
    assert len(tags) == 4 and tags.names == ["prefill", "decode", "draft"]
    tags.clear()
    assert len(tags) == 0 and tags.get(3) is None and tags.names == []
    tags.add(0, "decode", 1, 1)
    assert tags.values() == [("decode", 1, 1)]


def test_a_decode_loop_still_splits_its_phases_from_the_compact_tags() -> None:
    """The generation section is made from the arrays as it was from the dict."""

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(16, 8)
            self.head = nn.Linear(8, 16)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.head(self.emb(ids))
            return out

    model = Tiny()
    with torch.no_grad(), layerprof.Recorder(model) as rec:
        model(torch.zeros(1, 2, 3, dtype=torch.long))  # not (batch, tokens): untagged
        for _ in range(2):
            model(torch.zeros(2, 5, dtype=torch.long))  # prefill
            for _ in range(3):
                model(torch.zeros(2, 1, dtype=torch.long))  # decode
        with rec.phase("draft"):
            model(torch.zeros(2, 1, dtype=torch.long))
    gen = rec.profile().generation
    assert gen is not None
    assert (gen.new_tokens, gen.prompt_tokens, gen.batch, gen.generates) == (8, 5, 2, 2)
    assert {p.name for p in gen.phases} == {"prefill", "decode", "draft"}
