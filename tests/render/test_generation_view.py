"""The generation section in the console and the HTML report (issue 43, item 6): named
phases shown, not only saved; two names that differ by a NUL kept apart; a share of the
peak above 100 % not printed but explained."""

from __future__ import annotations

import json
from dataclasses import replace

import torch

import layerprof
from layerprof import codec
from layerprof.pivot.sections.flops import Peak
from layerprof.pivot.sections.generation import Phase, PhaseLayer
from tests.support.zoo_models import ToyLM


def recorded(named: tuple[str, ...]) -> layerprof.Profile:
    """A hand-written decode loop: a prefill, then per step a forward in each of the
    ``named`` phases and a decode."""
    model = ToyLM().eval()
    rec = layerprof.Recorder(model)
    with torch.no_grad(), rec:
        logits = model(torch.randint(0, 64, (2, 8)))
        for _ in range(3):
            nxt = logits[:, -1:].argmax(-1)
            for name in named:
                with rec.phase(name):
                    model(nxt)
            logits = model(nxt)
    return rec.profile()


def test_a_named_phase_reaches_the_console_and_the_html_report() -> None:
    prof = recorded(("draft",))
    g = prof.generation
    assert g is not None and [p.name for p in g.phases] == ["prefill", "draft", "decode"]
    text = str(prof.render("console"))
    assert "phases (per forward, per-layer pass)" in text
    assert "layers per forward of draft" in text
    draft_row = next(line for line in text.splitlines() if line.strip().startswith("draft"))
    assert " 3 " in draft_row and " 2 " in draft_row  # 3 forwards of 2 tokens
    page = str(prof.render("html"))
    assert 'id="lp-generation-phases"' in page and 'id="lp-generation-phase-0"' in page
    assert "draft total" in page and "draft self" in page


def test_phases_whose_names_differ_by_a_nul_stay_apart() -> None:
    prof = recorded(("a", "a\x00"))
    g = prof.generation
    assert g is not None
    assert [(p.name, p.forwards) for p in g.phases] == [
        ("prefill", 1), ("a", 3), ("a\x00", 3), ("decode", 3),
    ]  # fmt: skip
    back = codec.from_dict(json.loads(json.dumps(codec.to_dict(prof))))
    assert back.generation is not None and [p.name for p in back.generation.phases] == [
        "prefill", "a", "a\x00", "decode",
    ]  # fmt: skip
    text = str(prof.render("console"))
    assert "\x00" not in text  # shown escaped, as every name is
    assert text.count("layers per forward of a") == 2


def test_a_phase_forward_is_its_outermost_layers() -> None:
    """An encoder run apart (no root call) is one forward of the encode phase."""
    layers = (
        PhaseLayer("encoder", 5.0, 1.0), PhaseLayer("encoder.block.0", 4.0, 4.0),
        PhaseLayer("shared", 0.5, 0.5),
    )  # fmt: skip
    assert Phase("encode", 3, 24, layers).forward_ns == 5.5
    with_root = (PhaseLayer("", 9.0, 1.0), *layers)
    assert Phase("prefill", 3, 24, with_root).forward_ns == 9.0


def test_a_share_of_the_peak_above_100_percent_is_explained_not_printed() -> None:
    """A layer at 144 % of a measured peak: the peak was measured low or the count is
    wrong; the table shows no share and a line says which and why."""
    prof = recorded(())
    g = prof.generation
    assert g is not None
    flops = 1_440_000  # in 1 ms: 1.44 GFLOP/s against a 1 GFLOP/s peak
    root = PhaseLayer("", 1e6, 1e6, flops=flops, bytes=1_000_000)
    low = Peak(1e9, 1e10, "cached", "measured on a test CPU; measured while the machine was busy")
    g2 = replace(g, phases=(Phase("prefill", 1, 16, (root,)), Phase("decode", 3, 2, (root,))),
                 peak=low)  # fmt: skip
    shown = replace(prof, generation=g2)
    text = str(shown.render("console"))
    assert text.count("144.0%") == 1  # in the line that explains it, not in the table
    assert "1 share of the peak above 100 % (up to 144.0%, the model) not shown" in text
    assert "the peak was measured low (a busy machine)" in text
    assert "measured while the machine was busy" in text  # the peak's detail
    page = str(shown.render("html"))
    assert page.count("144.0%") == 1 and "not shown" in page
    fine = replace(g2, peak=Peak(1e10, 1e10, "given", "--peak"))
    assert "14.4%" in str(replace(prof, generation=fine).render("console"))
