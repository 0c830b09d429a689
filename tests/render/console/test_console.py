"""Golden console output; the printed numbers must add up."""

from __future__ import annotations

import io
from dataclasses import replace

import torch
from rich.console import Console
from torch import nn

from layerprof import Recorder
from layerprof.capture.platform.clocks import FakeClock
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import Meta
from layerprof.render.console.profile import print_profile
from tests.support import zoo_models as zoo
from tests.support.golden_files import check_golden
from tests.support.profiles import fake_profile


def render(**options: object) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=120, color_system=None, force_terminal=False)
    print_profile(fake_profile(), console=console, **options)  # type: ignore[arg-type]
    return buf.getvalue()


def test_tree_golden() -> None:
    check_golden("console_tree.txt", render())


def test_top_golden() -> None:
    check_golden("console_top.txt", render(top=3))


def test_printed_numbers_add_up() -> None:
    lines = [ln for ln in render(shapes=False).splitlines() if "│" in ln]
    cells = [[c.strip() for c in ln.split(" │ ")] for ln in lines]
    values = {c[0].lstrip("├└─│ "): (float(c[3]), c[4]) for c in cells}
    assert values["Containers"][0] == values["blocks"][0] + values["heads"][0] + float(
        values["Containers"][1]
    )
    assert values["blocks"][0] == values["0"][0] + values["1"][0] + values["2"][0]
    assert values["heads"][0] == values["cls"][0] + values["box"][0]


def test_user_text_is_not_markup() -> None:
    prof = fake_profile().with_notes(Note("test", "checkpoint [/tmp/x] and [bold]b[/bold]"))
    prof = replace(prof, meta=replace(prof.meta, inputs=("@r/[/x]/b.pt",)))
    buf = io.StringIO()
    print_profile(prof, console=Console(file=buf, width=120, color_system=None))
    text = buf.getvalue()
    assert "@r/[/x]/b.pt" in text and "[/tmp/x] and [bold]b[/bold]" in text


def deep_fake_profile() -> Profile:
    """A BERT-shaped tree (qualified names, 7 levels) of fake-clock leaves: exact times."""
    clock = FakeClock(scale=1_000)

    def node(**children: nn.Module) -> nn.Sequential:
        seq = nn.Sequential()
        for name, child in children.items():
            seq.add_module(name, child)
        return seq

    def layer(i: int) -> nn.Module:
        w = lambda ns: zoo.Work(clock, ns * (i + 1))  # noqa: E731 - reads as a table
        return node(
            attention=node(
                self=node(query=w(410), key=w(420), value=w(430), dropout=w(7)),
                output=node(dense=w(300), LayerNorm=w(90), dropout=w(6)),
            ),
            intermediate=node(dense=w(1250), intermediate_act_fn=w(480)),
            output=node(dense=w(1260), LayerNorm=w(95), dropout=w(5)),
        )

    model = node(
        bert=node(
            embeddings=node(word_embeddings=zoo.Work(clock, 70), LayerNorm=zoo.Work(clock, 50)),
            encoder=node(layer=node(**{str(i): layer(i) for i in range(12)})),
        ),
        classifier=zoo.Work(clock, 30),
    )
    with Recorder(model, clock=clock) as rec:
        model(torch.zeros(2, 128, 768))
    return rec.profile(meta=Meta(model="BertForSequenceClassification", created="fixed"))


def test_deep_tree_golden_at_100_columns() -> None:
    """The 100-column layout of a deep model: the shapes give way, every time stays."""
    buf = io.StringIO()
    console = Console(file=buf, width=100, color_system=None, force_terminal=False)
    print_profile(deep_fake_profile(), console=console)
    check_golden("console_deep_100.txt", buf.getvalue())


def test_deep_tree_golden_at_80_columns_top() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=80, color_system=None, force_terminal=False)
    print_profile(deep_fake_profile(), console=console, top=12)
    check_golden("console_deep_80_top.txt", buf.getvalue())
