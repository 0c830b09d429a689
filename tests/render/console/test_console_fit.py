"""Console tables in 80-160 columns: every number the profile holds prints whole.

Real deep models (a BERT-like encoder, a ResNet-50-like tree) are run and
rendered into rich consoles of terminal widths and through a pipe; the test
reads the numbers back from the text, row by row.
"""

from __future__ import annotations

import io
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from torch import nn

from layerprof.analysis.diff import diff
from layerprof.capture.options import RunOptions
from layerprof.capture.runner import run_model
from layerprof.pivot.change import fmt_pct
from layerprof.pivot.profile import LayerRow, Profile
from layerprof.pivot.records import OpStat, merge_layers, merge_shapes
from layerprof.render.console.columns import (
    Col,
    Hide,
    Label,
    Row,
    Shrink,
    abbreviate,
    compact_path,
    distinct_head,
    fit_table,
    print_table,
)
from layerprof.render.console.diff import print_diff
from layerprof.render.console.ops import render_ops, sort_ops
from layerprof.render.console.profile import print_profile
from layerprof.render.terminal import PIPE_WIDTH, make_console
from layerprof.trace import analyze
from layerprof.units import fmt_calls, fmt_delta_ms, fmt_ms, unit_for
from tests.support.deep_models import bert_like
from tests.support.html_subjects import saved

WIDTHS = (80, 100, 120)


def measure(model: nn.Module, inputs: tuple[torch.Tensor, ...], **options: Any) -> Profile:
    torch.manual_seed(0)
    opts = RunOptions(warmup=0, iters=2, model_name=type(model).__name__, **options)
    return run_model(model, inputs, {}, opts)


@pytest.fixture(scope="module")
def profiles() -> dict[str, Profile]:
    """Saved runs of the two deep trees (scripts/make-test-profiles.py measures them)."""
    return {"bert": saved("bert"), "resnet50": saved("resnet50")}


def console(width: int, *, terminal: bool = True) -> Console:
    """A recording console of ``width`` columns; ``terminal=False`` is a pipe."""
    return Console(
        file=io.StringIO(), width=width, record=True, force_terminal=terminal, color_system=None
    )


def scaled(profile: Profile) -> Profile:
    """``profile`` with each layer's times scaled by one of 0.5x to 20x (by the layer's
    place in path order): changes both ways, of every width, that no machine load moves."""
    factors = (0.5, 0.8, 1.0, 1.3, 2.0, 20.0)
    samples = {
        path: replace(
            s,
            total_ns=(s.total_ns.values * factors[i % len(factors)]).astype(np.int64),
            self_ns=(s.self_ns.values * factors[i % len(factors)]).astype(np.int64),
        )
        for i, (path, s) in enumerate(sorted(profile.samples.items()))
    }
    return replace(profile, samples=samples)


def whole(number: str, line: str) -> bool:
    """``number`` is in ``line`` and not as a piece of a longer or cut number."""
    return re.search(rf"(?<![\w.,…]){re.escape(number)}(?![\w.,…])", line) is not None


def row_numbers(profile: Profile, row: LayerRow, *, flat: bool, largest: float) -> list[str]:
    """What the layer table must show for ``row``: calls, total, self and share."""
    unit = unit_for(largest)
    root_total = sum(r.row.total_ns for r in profile.tree())
    share = (row.self_ns if flat else row.total_ns) / root_total
    out = [fmt_calls(row.calls) + ("~" if row.calls_vary else "")]
    if row.calls:
        out += [unit.fmt(row.total_ns), unit.fmt(row.self_ns), f"{100 * share:.1f}"]
    for ns in (row.device_total_ns, row.device_self_ns, row.backward_total_ns):
        if ns is not None:
            out.append(unit.fmt(ns))
    return out


def body_lines(text: str) -> list[str]:
    """The data rows of the layer table (header lines hold ┃, notes no │)."""
    return [ln for ln in text.splitlines() if " │ " in ln and "┃" not in ln]


def check_layer_table(
    profile: Profile, text: str, width: int, *, top: int | None = None
) -> list[str]:
    """Every number of every layer row is whole on its line; lines fit ``width``
    unless a note says the table is wider. Returns the note lines."""
    nodes = [n.row for r in profile.tree() for n in r.walk()]
    flat = top is not None
    shown = nodes
    if flat:
        shown = sorted((r for r in nodes if r.calls), key=lambda r: -r.self_ns)[:top]
    lines = body_lines(text)
    assert len(lines) == len(shown), text
    largest = max(r.total_ns for r in shown)
    for row, line in zip(shown, lines, strict=True):
        for number in row_numbers(profile, row, flat=flat, largest=largest):
            assert whole(number, line), f"{number!r} of {row.path!r} cut in\n{line}"
    notes = [ln for ln in text.splitlines() if "hidden columns" in ln or "columns wide" in ln]
    if not any("columns wide" in n for n in notes):
        assert max(cell_len(ln) for ln in text.splitlines()) <= width, text
    return notes


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("model", ["bert", "resnet50"])
def test_tree_numbers_whole_in_terminals(
    profiles: dict[str, Profile], model: str, width: int
) -> None:
    out = console(width)
    print_profile(profiles[model], console=out)
    text = out.export_text()
    notes = check_layer_table(profiles[model], text, width)
    if model == "resnet50" and width == 120 and not notes:
        # short names: all columns fit (a loaded machine can widen the time columns
        # enough that the shapes go, and then the checks below apply)
        assert " In " in text, text
        return
    # the shapes go first, and the table says so
    assert notes and notes[0].startswith("hidden columns: In"), text
    assert f"terminal {width} columns" in notes[0]
    assert "--no-shapes" in notes[0]


@pytest.mark.parametrize("width", WIDTHS)
def test_top_list_of_long_paths_keeps_numbers(profiles: dict[str, Profile], width: int) -> None:
    out = console(width)
    print_profile(profiles["bert"], console=out, top=15)
    text = out.export_text()
    check_layer_table(profiles["bert"], text, width, top=15)
    # paths like bert.encoder.layer.11.attention.self.query are abbreviated, not the times
    assert "…" in text or width >= 120


def test_pipe_width_and_very_long_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipe gets PIPE_WIDTH columns, and a 300-character module name does not
    push a number out of it."""
    monkeypatch.delenv("COLUMNS", raising=False)
    assert make_console().width == PIPE_WIDTH  # pytest's stdout is not a terminal
    model = nn.Sequential()
    model.add_module("a" * 300, nn.Linear(8, 8))
    model.add_module("b" * 40 + "_" + "c" * 40, nn.ReLU())
    profile = measure(model, (torch.randn(2, 8),))
    out = console(PIPE_WIDTH, terminal=False)
    print_profile(profile, console=out)
    text = out.export_text()
    check_layer_table(profile, text, PIPE_WIDTH)
    assert "aaaa…aaaa" in text
    assert "output 160 columns" not in text  # the shapes fit: nothing hidden


def test_pipe_lines_end_without_padding(profiles: dict[str, Profile]) -> None:
    """Piped or saved, no line ends in a table's cell padding; a terminal keeps its
    layout as rich draws it, and the rest is the same either way (the note on hidden
    columns names a terminal or an output)."""
    texts = {}
    for terminal in (True, False):
        out = console(120, terminal=terminal)
        print_profile(profiles["bert"], console=out)
        texts[terminal] = out.export_text()
    assert not [ln for ln in texts[False].splitlines() if ln.endswith(" ")]
    assert [ln for ln in texts[True].splitlines() if ln.endswith(" ")]
    same = [ln.rstrip() for ln in texts[True].splitlines() if "hidden columns" not in ln]
    assert same == [ln for ln in texts[False].splitlines() if "hidden columns" not in ln]
    check_layer_table(profiles["bert"], texts[False], 120)


def test_pipe_honours_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "212")
    assert make_console().width == 212


def test_no_shapes_drops_no_other_column(profiles: dict[str, Profile]) -> None:
    out = console(120)
    print_profile(profiles["bert"], console=out, shapes=False)
    text = out.export_text()
    assert check_layer_table(profiles["bert"], text, 120) == []
    assert "Params" in text and "FLOPs" in text


def test_too_narrow_prints_wide_rather_than_cut() -> None:
    """Backward columns in 50 columns: no step is left, so the table prints at the
    width it needs (the terminal wraps) and says so; no number is cut."""
    model, inputs = bert_like()
    profile = measure(model, inputs, backward=True)
    out = console(50)
    print_profile(profile, console=out, depth=3)
    text = out.export_text()
    nodes = [n.row for r in profile.tree() for n in r.walk() if n.row.depth <= 3]
    largest = max(r.total_ns for r in nodes)
    lines = body_lines(text)
    assert len(lines) == len(nodes)
    for row, line in zip(nodes, lines, strict=True):
        for number in row_numbers(profile, row, flat=False, largest=largest):
            assert whole(number, line), (number, line)
    assert re.search(r"table is \d+ columns wide \(terminal 50 columns\)", text), text


def test_ops_tables_keep_numbers_with_long_names() -> None:
    name = "aten::_scaled_dot_product_flash_attention_for_cpu_backward_with_a_long_tail"
    ops = [
        OpStat(f"{name}_{i}", 3 + i, 1_234_567 * (i + 1), 2_345_678 * (i + 1), None,
               "bert.encoder.layer.11.attention.self", "[[2, 12, 128, 64], [2, 12, 128, 64]]")
        for i in range(4)
    ]  # fmt: skip
    for width in WIDTHS:
        out = console(width)
        render_ops(ops, out, top=10)
        text = out.export_text()
        unit = unit_for(max(o.total_ns for o in ops))
        total_self = sum(o.self_ns for o in ops)
        for o in ops:
            wanted = [fmt_calls(o.calls), unit.fmt(o.self_ns), unit.fmt(o.total_ns)]
            wanted.append(f"{100 * o.self_ns / total_self:.1f}")
            assert any(all(whole(w, ln) for w in wanted) for ln in text.splitlines()), text
        assert max(cell_len(ln) for ln in text.splitlines()) <= width


@pytest.fixture(scope="module")
def bert_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real CPU trace of the BERT-like model with its nn.Module spans."""
    from torch.profiler import ProfilerActivity, profile

    model, inputs = bert_like()
    path = tmp_path_factory.mktemp("trace") / "bert.json"
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU], with_stack=True) as p:
        model(*inputs)
    p.export_chrome_trace(str(path))
    return path


@pytest.mark.parametrize("width", WIDTHS)
def test_trace_report_keeps_numbers(bert_trace: Path, width: int) -> None:
    """``analyze``'s console report of a real trace: the layer list (dotted paths of
    nn.Module spans) and the operator table keep every number whole."""
    from layerprof import sinks

    run = analyze(bert_trace)
    out = console(width)
    sinks.show(run, console=out, top=10)
    text = out.export_text()
    lines = text.splitlines()
    (profile,) = run.ranks
    rows = sorted((n.row for r in profile.tree() for n in r.walk() if n.row.calls),
                  key=lambda r: -r.self_ns)[:10]  # fmt: skip
    largest = max(r.total_ns for r in rows)
    for row in rows:
        wanted = row_numbers(profile, row, flat=True, largest=largest)
        assert any(all(whole(w, ln) for w in wanted) for ln in lines), (wanted, text)
    ops = sort_ops(merge_layers(merge_shapes(profile.ops)), "self")[:10]
    unit = unit_for(max(o.total_ns for o in ops))
    for o in ops:
        wanted = [fmt_calls(o.calls), unit.fmt(o.self_ns), unit.fmt(o.total_ns)]
        assert any(all(whole(w, ln) for w in wanted) for ln in lines), (wanted, text)
    tables = [ln for ln in lines if "─" not in ln]  # the rank rule may be as wide as it likes
    assert max(cell_len(ln) for ln in tables) <= width, text


@pytest.mark.parametrize("width", WIDTHS)
def test_diff_tables_keep_numbers(profiles: dict[str, Profile], width: int) -> None:
    # the new side is the saved run with each layer scaled by a fixed factor, not a second
    # measurement: under load a measured side's changes reached +1,066,819 %, so what the
    # table had to fit depended on the machine
    result = diff(profiles["bert"], scaled(profiles["bert"]), threshold_pct=0.0)
    out = console(width)
    print_diff(result, out, top=20)
    text = out.export_text()
    layers = result.changed_layers()[:20]
    assert layers
    for row in layers:
        c = row.change
        wanted = [fmt_ms(c.base_ns), fmt_ms(c.new_ns), fmt_delta_ms(c.delta_ns), fmt_pct(c)]
        wanted.append(fmt_pct(row.total))
        assert any(all(whole(w, ln) for w in wanted) for ln in text.splitlines()), (wanted, text)
    if "table needs" not in text:
        assert max(cell_len(ln) for ln in text.splitlines()) <= width, text


# ---- the layout engine --------------------------------------------------------------


def test_abbreviate_keeps_both_ends() -> None:
    assert abbreviate("bert.encoder.layer.11.attention", 15) == "bert.en…tention"
    assert abbreviate("short", 15) == "short"
    assert abbreviate("slower (called twice)", 10, "end") == "slower (c…"
    assert abbreviate("模型层模型层模型层", 9) == "模型…型层"  # two cells per character
    assert cell_len(abbreviate("模型层模型层模型层", 8)) == 8


def test_tree_label_keeps_its_name_before_its_guides() -> None:
    cols = [Col("Layer"), Col("ms", number=True)]
    guides = "│  " * 8 + "└─ "
    rows = [Row((Label(guides, "intermediate_act_fn"), "1.234"))]
    fitted = fit_table(console(30), Table, cols, rows, [Shrink(("Layer",), 10)])
    out = console(30)
    out.print(fitted)
    (line,) = [ln for ln in out.export_text().splitlines() if "1.234" in ln]
    assert "… └─ inte…ct_fn │" in line, line  # the guides gave way first
    assert cell_len(line) == 30 and whole("1.234", line)


def test_steps_go_only_as_far_as_needed() -> None:
    cols = [Col("name"), Col("type"), Col("ms", number=True)]
    rows = [Row(("x" * 30, "y" * 30, "12.345"))]

    def frame() -> Table:
        return Table(show_edge=False, pad_edge=False)

    out = console(200)
    fitted = fit_table(out, frame, cols, rows, [Hide(("type",))])
    assert fitted.hidden == () and fitted.width == 30 + 30 + 6 + 6
    out = console(60)
    fitted = fit_table(out, frame, cols, rows, [Shrink(("type",), 10), Hide(("type",))])
    assert fitted.hidden == () and fitted.width == 60  # shortening was enough
    fitted = fit_table(console(30), frame, cols, rows, [Shrink(("type",), 10), Hide(("type",))])
    assert fitted.hidden == ("type",)  # hidden, and the name got its cells back
    assert fitted.width <= 30 + 6 + 3


def test_numbers_are_never_shrunk() -> None:
    with pytest.raises(ValueError, match="holds numbers"):
        fit_table(
            console(10), Table, [Col("ms", number=True)], [Row(("1.0",))], [Shrink(("ms",), 1)]
        )


_FRAMES = {
    "plain": lambda: Table(show_edge=False, pad_edge=False),
    "heavy": lambda: Table(title="a title"),
    "simple": lambda: Table(box=box.SIMPLE_HEAD, title="t"),
}
_numbers = st.one_of(
    st.floats(0, 1e7, allow_nan=False).map(lambda x: f"{x:,.3f}"),
    st.integers(0, 10**6).map(str),
    st.just("-"),
)
_words = st.text(
    st.characters(codec="utf-8", categories=["L", "N", "P", "Zs"], exclude_characters="…"),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.booleans(), min_size=1, max_size=7),
    data=st.data(),
    width=st.integers(20, 200),
    frame=st.sampled_from(sorted(_FRAMES)),
)
def test_number_cells_print_whole_at_any_width(
    kinds: list[bool], data: st.DataObject, width: int, frame: str
) -> None:
    """Random tables at random widths: each row's number cells are whole on the
    line that holds the row's id; lines fit unless the table says it needs more."""
    cols = [Col("id", number=True)] + [
        Col(f"n{i}" if number else f"text column {i}", number=number, key=f"c{i}")
        for i, number in enumerate(kinds)
    ]
    texts = [f"c{i}" for i, number in enumerate(kinds) if not number]
    steps = [Shrink(tuple(texts), 8), Hide(tuple(texts[:1])), Shrink(tuple(texts), 1)]
    rows = []
    for r in range(data.draw(st.integers(1, 6))):
        cells = [f"#{r:03d}"] + [data.draw(_numbers if n else _words) for n in kinds]
        rows.append(Row(tuple(cells)))
    out = console(width)
    fitted = print_table(out, _FRAMES[frame], cols, rows, steps=steps)
    text = out.export_text()
    lines = text.splitlines()
    for r, row in enumerate(rows):
        (line,) = [ln for ln in lines if f"#{r:03d}" in ln]
        for cell, number in zip(row.cells[1:], kinds, strict=True):
            if number:
                assert isinstance(cell, str) and whole(cell, line), (cell, line)
    # wider than the room only when every step was taken, and then it says so
    assert all(cell_len(ln) <= max(width, fitted.width) for ln in lines)
    if fitted.width > width:
        assert "columns wide" in re.sub(r"\s+", " ", text)  # the note may wrap


def test_shrinking_keeps_distinct_names_distinct() -> None:
    """Two layers whose paths differ only in their middle (``model.layers.0.self_attn.k_proj``
    and ``...1...``) read as the same ``model.layers.…lf_attn.k_proj`` in an 80-column
    generate report: a name column gives way only as far as its names stay distinct."""
    names = [f"model.layers.{i}.self_attn.{p}_proj" for i in range(2) for p in "kvo"]
    cols = [Col("Layer", key="name"), Col("ms", number=True)]
    rows = [Row((n, f"{k}.125")) for k, n in enumerate(names)]

    def frame() -> Table:
        return Table(show_edge=False, pad_edge=False, box=box.ASCII)

    fitted = fit_table(console(30), frame, cols, rows, [Shrink(("name",), 8)])
    out = console(30)
    out.print(fitted)
    shown = [ln.split("|")[0].strip() for ln in out.export_text().splitlines() if ".125" in ln]
    assert len(shown) == len(names) and len(set(shown)) == len(names), shown
    assert fitted.width <= 30 and shown[0].startswith("model.layers.0…"), shown
    # names that half-and-half keeps apart are cut as before
    assert abbreviate("bert.encoder.layer.11.attention", 15) == "bert.en…tention"
    assert distinct_head(["a" * 30, "b" * 30], 15) is None
    # no place keeps these apart at 4 cells: half, as before
    assert distinct_head([f"x{i:03d}yyyyyyy" for i in range(30)], 4) is None


def test_paths_no_single_ellipsis_keeps_apart_are_cut_by_segment() -> None:
    """A 12-layer BERT's ``bert.encoder.layer.N.attention.output.dense`` and
    ``bert.encoder.layer.N.output.dense`` differ at the index and near the end: at 23
    cells every place of one ellipsis makes rows of one name (``bert.encod…output.dense``
    for all of them in an 80-column diff). Such paths are cut by their segments."""
    names = [
        f"bert.encoder.layer.{i}.{part}"
        for i in range(12)
        for part in ("attention.output.dense", "output.dense", "attention.self.query")
    ]
    cols = [Col("Layer", key="name")] + [Col(f"c{k}", number=True) for k in range(6)]
    rows = [Row((n, *(f"{k}.0063" for _ in range(6)))) for k, n in enumerate(names)]

    def frame() -> Table:
        return Table(box=box.HEAVY_HEAD)

    out = console(80)
    fitted = print_table(out, frame, cols, rows, steps=[Shrink(("name",), 12)])
    lines = [ln for ln in out.export_text().splitlines() if ".0063" in ln]
    shown = [ln.split("│")[1].strip() for ln in lines]
    assert len(set(shown)) == len(names), shown
    assert fitted.width <= 80
    # each keeps its layer's index and its tail
    for name, text in zip(names, shown, strict=True):
        index = name.split(".")[3]
        head = f"b.e.l.{index}"
        assert text.startswith(head) and text[len(head)] in ".…", (name, text)
        assert text[-3:] == name[-3:], (name, text)
    assert compact_path("bert.encoder.layer.11.attention.output.dense", 23) == (
        "b.e.l.11.a.output.dense"
    )
    assert compact_path("short.name", 23) == "short.name"
    # too long even by its segments: as short as segments go (the ellipsis comes after)
    assert compact_path("a" * 40 + "." + "b" * 40, 12) == "a." + "b" * 40
