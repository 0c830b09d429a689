"""Saved profile documents with every kind of section a diff or a report reads back
(a generate's phases, a training loop with activation checkpointing's recomputes, the
repeats of several processes, operators), built from real tiny models and known times:
the subjects of the tests that change one saved value and expect a one-line error."""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import replace
from typing import Any

import torch
from torch import nn

import layerprof
from layerprof.cli.processes import gather
from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.generation import Generation, Phase, PhaseLayer
from layerprof.pivot.sections.loop import Recompute
from layerprof.stats import Summary
from tests.support.diff_subjects import mlp, synth
from tests.support.paths import ROOT

#: 0-40 µs of known jitter per sample, so that every spread is known and above zero.
JITTER = tuple((i % 5) * 10_000 for i in range(21))


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))


def generated(ttft_ms: float = 3.0, itl_ms: float = 1.0, head_ms: float = 0.5) -> Profile:
    """A Recorder profile of a tiny model with a generation section of known times: the
    clean pass's TTFT, ITL and whole generates, and a decode phase whose layer ``2``
    takes ``head_ms`` per step."""
    model = tiny()
    with torch.no_grad(), layerprof.Recorder(model) as rec:
        for _ in range(5):
            model(torch.randn(2, 8))
    head = [head_ms * 1e6 + j for j in JITTER]
    g = Generation(
        new_tokens=8, prompt_tokens=4, batch=1, generates=3,
        ttft_ns=[ttft_ms * 1e6 + j for j in JITTER[:3]],
        itl_ns=[itl_ms * 1e6 + j for j in JITTER],
        generate_ns=[(ttft_ms + 7 * itl_ms) * 1e6 + j for j in JITTER[:3]],
        phases=(Phase("decode", 21, 1, (PhaseLayer("2", head[0], head[0], Summary.of(head)),)),),
    )  # fmt: skip
    return replace(rec.profile(), generation=g)


def looped() -> Profile:
    """A Recorder profile of three training steps, with a recompute of layer ``0`` in each."""
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with layerprof.Recorder(model, backward=True) as rec:
        for _ in range(3):
            model(torch.randn(5, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
            rec.step()
    p = rec.profile()
    assert p.loop is not None
    loop = replace(p.loop, recompute=(Recompute("0", (2_000, 2_100, 1_900), 3),))
    return replace(p, loop=loop)


def repeated() -> Profile:
    """Three processes of one model, gathered (a ``repeats`` section)."""
    model = mlp()
    return gather([synth(model, seed=s) for s in range(3)])


@functools.cache
def _documents() -> dict[str, str]:
    ops = (ROOT / "tests" / "data" / "profiles" / "ops.json").read_text()
    made = {"generated": generated(), "looped": looped(), "repeated": repeated()}
    docs = {name: json.dumps(p.to_dict(samples=True)) for name, p in made.items()}
    # without --samples a file keeps only the summaries, which are then what is read
    docs |= {f"{name}-summaries": json.dumps(p.to_dict()) for name, p in made.items()}
    return docs | {"ops": ops}


def document(name: str) -> dict[str, Any]:
    """A fresh copy of one saved document: one of ``DOCUMENTS``."""
    doc: dict[str, Any] = json.loads(_documents()[name])
    return copy.deepcopy(doc)


DOCUMENTS = (
    "generated", "looped", "repeated", "generated-summaries", "looped-summaries",
    "repeated-summaries", "ops",
)  # fmt: skip
