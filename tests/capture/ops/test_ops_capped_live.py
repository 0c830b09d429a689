"""Live ops mode (``layerprof run --ops``) caps its operator rows as a trace's profile
does; it must say so with the same ``ops-capped`` note (issue 43, leftover of item 16)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import layerprof
from layerprof.trace import attribution


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4), nn.Softmax(dim=-1))


def test_live_ops_capped_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attribution, "MAX_OP_ROWS", 2)
    prof = layerprof.profile(_mlp(), torch.randn(4, 8), warmup=0, iters=2, ops=True)
    summed = [o for o in prof.ops if o.name == attribution.OTHER_OPS]
    assert summed, "the small cap must have summed some operators"
    capped = [n for n in prof.notes if n.kind == "ops-capped"]
    assert len(capped) == 1
    assert capped[0].data == {"max_rows": 2, "summed_rows": len(summed)}


def test_live_ops_uncapped_has_no_note() -> None:
    prof = layerprof.profile(_mlp(), torch.randn(4, 8), warmup=0, iters=2, ops=True)
    assert prof.ops and not any(o.name == attribution.OTHER_OPS for o in prof.ops)
    assert not any(n.kind == "ops-capped" for n in prof.notes)
