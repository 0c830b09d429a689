"""Names that try to forge lines, break files or cost the renderer more than their size.

A module, op, step or file name may hold a newline (``\\nlayerprof: all ranks OK``),
a carriage return, a bidi override or a double quote, and a note or a path may be
megabytes long. Every string of a saved profile, analysis and diff is poisoned in
turn and the reports are read back: no forged line, names shown escaped, output
bounded. Models and traces are built here with torch.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch
from torch import nn

from layerprof.capture.options import OpOptions, RunOptions
from layerprof.capture.profiling.profiler import exported_trace
from layerprof.capture.runner import run_model
from layerprof.cli import main
from layerprof.pivot.notes import Note
from layerprof.render.stacks import folded_lines
from layerprof.render.table import profile_to_csv
from layerprof.render.terminal import CUT_MARK, MAX_SHOWN, escape_controls
from tests.support.hostile_models import newline_names

ROOT = Path(__file__).resolve().parents[1]
FORGED = "layerprof: all ranks OK"
BIDI = "\u202e"  # RIGHT-TO-LEFT OVERRIDE
# Keys whose values the loaders check against a fixed set: poisoned, the file is refused.
FIXED = {"schema", "verdict", "status", "unit", "kind", "basis", "clock", "metric", "severity"}


def saved_profile(tmp_path: Path, name: str = "p.json", *, ops: bool = True) -> Path:
    torch.manual_seed(0)
    opts = RunOptions(warmup=1, iters=3, model_name="net", ops=OpOptions() if ops else None)
    profile = run_model(newline_names(), (torch.randn(2, 4),), {}, opts)
    return profile.with_notes(Note("test", "a note")).save(tmp_path / name)


def poisoned(doc: Any, marks: list[str], skip: set[str], path: tuple[str, ...] = ()) -> Any:
    """``doc`` with ``\\nFORGED<i>`` after every string value (``marks[i]`` names where)."""
    if isinstance(doc, dict):
        return {k: poisoned(v, marks, skip, (*path, k)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [poisoned(v, marks, skip, (*path, "[]")) for v in doc]
    if not isinstance(doc, str):
        return doc
    key = "/".join(path)
    if key in skip or path[-1] in FIXED or "settings" in path:
        return doc
    if key not in marks:
        marks.append(key)
    return f"{doc}\nFORGED{marks.index(key)}"


def report_of_poisoned(
    source: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: Callable[[Path], list[str]],
) -> tuple[str, list[str]]:
    """The output of ``argv(poisoned file)``. Strings a loader checks against a fixed
    set are left as they were (found by the error, which names them escaped)."""
    doc = json.loads(source.read_text())
    skip: set[str] = set()
    for _ in range(40):
        marks: list[str] = []
        target = tmp_path / f"poisoned-{source.name}"
        target.write_text(json.dumps(poisoned(doc, marks, skip)))
        code = main(argv(target))
        out, err = capsys.readouterr()
        if code in (0, 1):
            return out + err, marks
        refused = re.search(r"FORGED(\d+)", err)
        assert refused, err
        skip.add(marks[int(refused.group(1))])
    raise AssertionError("the poisoned file was never read")


def assert_no_forged_line(text: str, marks: list[str]) -> None:
    """Every poisoned string shows its newline as ``\\n``: no line starts with it."""
    forged = sorted({marks[int(m)] for m in re.findall(r"(?<!\\n)FORGED(\d+)", text)})
    assert not forged, f"newline printed raw from {forged}"
    assert not re.search(r"^\s*layerprof: all ranks OK", text, re.MULTILINE)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A saved profile (ops mode), a second one, their diff, a torch.profiler trace
    of the model and its saved analysis."""
    tmp = tmp_path_factory.mktemp("names")
    base, new = saved_profile(tmp, "base.json"), saved_profile(tmp, "new.json")
    diff = tmp / "diff.json"
    trace = tmp / "trace.json"
    analysis = tmp / "analysis.json"
    model = newline_names()
    with torch.profiler.profile(with_stack=True) as prof:
        for _ in range(2):
            model(torch.randn(2, 4))
            prof.step()
    prof.export_chrome_trace(str(trace))
    assert main(["diff", str(base), str(new), "--json", str(diff), "-q"]) == 0
    assert main(["analyze", str(trace), "--json", str(analysis), "-q"]) == 0
    return {"base": base, "new": new, "diff": diff, "trace": trace, "analysis": analysis}


# ---- item 10: newlines, CR and bidi overrides never reach the terminal raw -----------


@pytest.mark.parametrize("kind", ["base", "analysis", "diff"])
def test_report_shows_every_poisoned_string_escaped(
    files: dict[str, Path], kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, marks = report_of_poisoned(files[kind], tmp_path, capsys, lambda p: ["report", str(p)])
    assert len(marks) > 10  # names, notes, meta, steps were all poisoned
    assert_no_forged_line(text, marks)
    assert "\\nFORGED" in text


def test_diff_markdown_and_console_show_poisoned_meta_escaped(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for fmt in ("md", "console"):
        text, marks = report_of_poisoned(
            files["base"], tmp_path, capsys,
            lambda p, fmt=fmt: ["diff", str(p), str(files["new"]), "--format", fmt],  # type: ignore[misc]
        )  # fmt: skip
        assert_no_forged_line(text, marks)
        assert "\\nFORGED" in text, fmt


def test_diff_json_on_stdout_stays_valid_and_exact(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """C1 characters and bidi overrides, which the JSON encoder leaves raw, go to the
    terminal as JSON escapes (``\\u009b``), not as ``\\x9b`` (invalid JSON)."""
    doc = json.loads(files["base"].read_text())
    name = f"b\x9b{BIDI}"
    doc["layers"][-1]["path"] = name
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(doc))
    assert main(["diff", str(odd), str(odd), "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "\x9b" not in out and BIDI not in out and "\\u009b" in out
    assert name in {layer["path"] for layer in json.loads(out)["layers"]}


def test_run_prints_module_names_escaped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live run: tree, roofline, findings; CR and a bidi override too."""
    monkeypatch.chdir(ROOT)
    code = main(["run", "--arch", "tests.support.hostile_models:newline_names", "--input", "2x4",
                 "--warmup", "1", "--iters", "3"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert not re.search(r"^\s*" + FORGED, out, re.MULTILINE)
    assert f"a\\n{FORGED}" in out and "b\\rc" in out and "d\\u202ee" in out
    assert "\r" not in out and BIDI not in out


def test_a_trace_file_name_cannot_forge_a_line(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / f"x\n{FORGED}\ny.rank-0.json").write_bytes(files["trace"].read_bytes())
    (ranks / "b.rank-1.json").write_bytes(files["trace"].read_bytes())
    (ranks / f"z\n{FORGED}.rank-2.json").write_text("{}")  # skipped: named in a line
    code = main(["analyze", str(ranks), "--partial"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert not re.search(r"^\s*" + FORGED, out + err, re.MULTILINE)
    assert f"x\\n{FORGED}\\ny.rank-0.json" in out


@pytest.mark.parametrize(
    "char", ["\n", "\r", *map(chr, [*range(0x202A, 0x202F), *range(0x2066, 0x206A)])]
)
def test_the_escaping_function_covers_newlines_and_bidi(char: str) -> None:
    shown = escape_controls(f"a{char}b")
    assert char not in shown and shown.startswith("a\\") and shown.endswith("b")
    assert escape_controls(shown) == shown


# ---- item 11: --stacks and torch's exported trace ------------------------------------


def test_folded_stacks_keep_one_line_per_layer() -> None:
    """A newline in a module or class name would start a new stack with no count."""
    torch.manual_seed(0)
    profile = run_model(newline_names(), (torch.randn(2, 4),), {}, RunOptions(warmup=1, iters=3))
    lines = folded_lines(profile)
    assert lines and all(re.fullmatch(r"[^\n;]+(;[^\n;]+)* [0-9]+", line) for line in lines)
    frames = {frame for line in lines for frame in line.rsplit(" ", 1)[0].split(";")}
    assert {f"a\\n{FORGED}", "b\\rc", "d\\u202ee"} <= frames
    assert {line.split(";")[0].rsplit(" ", 1)[0] for line in lines} == {"Sequential"}


def test_run_ops_trace_with_a_quote_in_a_module_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch writes ``"name": "blocks.say "hi"",``: read tolerantly, written valid."""
    monkeypatch.chdir(ROOT)
    trace, board = tmp_path / "t.json", tmp_path / "tb"
    code = main(["run", "--arch", "tests.support.hostile_models:quoted", "--input", "2x4", "--ops",
                 "--warmup", "1", "--iters", "2", "--trace", str(trace), "--tensorboard",
                 str(board), "-q"])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 0, err
    names = {e.get("name") for e in orjson.loads(trace.read_bytes())["traceEvents"]}
    # (torch 2.15 writes valid JSON by turning the quotes into apostrophes)
    assert any(f"say {q}hi{q}" in str(n) for n in names for q in "\"'")
    assert any(f"end{q}" in str(n) for n in names for q in "\"'")
    (written,) = board.iterdir()
    assert orjson.loads(written.read_bytes())["traceEvents"]


def test_exported_trace_keeps_a_name_that_looks_like_json(tmp_path: Path) -> None:
    """A name holding ``", "ph": "i`` stays one name, not a second key."""
    names = ['q "x"', 'end"', 'a ", "ph": "i', "plain"]
    with torch.profiler.profile() as prof:
        for name in names:
            with torch.profiler.record_function(name):
                torch.ones(2).add(1)
    path = tmp_path / "raw.json"
    prof.export_chrome_trace(str(path))
    raw = path.read_bytes()
    try:
        orjson.loads(raw)
        # torch 2.15 and newer write JSON, the quotes turned into apostrophes
        names = [n.replace('"', "'") for n in names]
    except orjson.JSONDecodeError:
        pass  # torch's file is not JSON: the reason for the tolerant read
    events = exported_trace(raw)["traceEvents"]
    spans = [e for e in events if e.get("name") in names]
    assert sorted(e["name"] for e in spans) == sorted(names)
    assert all(e["ph"] == "X" for e in spans)


def _torch_211_trace(names: list[str]) -> bytes:
    """A trace laid out as torch 2.11 exports it (an event's head on one line), with the
    names as it leaves them: unescaped (found running the suite under torch 2.11)."""
    events = []
    for i, name in enumerate(names):
        events.append(
            "  {\n"
            f'    "ph": "X", "cat": "user_annotation", "name": "{name}", "pid": 7, "tid": 7,\n'
            f'    "ts": {1000 + 10 * i}.5, "dur": 5.25,\n'
            '    "args": {\n'
            f'      "External id": {i + 1},"Record function id": 0, "Ev Idx": {i}\n'
            "    }\n"
            "  }"
        )
    head = '{\n  "schemaVersion": 1,\n  "baseTimeNanoseconds": 1790857026000000000,\n'
    return (head + '  "traceEvents": [\n' + ",\n".join(events) + "\n]}\n").encode()


def test_torch_211_trace_with_quotes_in_names_is_read() -> None:
    names = ['q "x"', 'end"', 'a ", "ph": "i', 'b ", "pid": 3, "tid": "', "plain"]
    raw = _torch_211_trace(names)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    events = exported_trace(raw)["traceEvents"]
    assert [e["name"] for e in events] == names
    assert all(e["pid"] == 7 and e["ph"] == "X" for e in events)
    assert orjson.loads(_torch_211_trace(["plain"]))["traceEvents"][0]["name"] == "plain"


def test_analyze_reads_a_torch_trace_with_quotes_in_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same file, exported by the user: ``analyze`` reads it (even when the bad
    line falls in a later batch of a large file) and names the span."""
    path = tmp_path / "quoted.json"
    with torch.profiler.profile() as prof:
        for _ in range(300):  # about 1 MB: several decode batches
            with torch.profiler.record_function('step "a"'):
                torch.ones(2).add(1)
    prof.export_chrome_trace(str(path))
    code = main(["analyze", str(path), "--json", str(tmp_path / "a.json"), "-q"])
    _, err = capsys.readouterr()
    assert code == 0, err
    written = (tmp_path / "a.json").read_text()
    assert 'step \\"a\\"' in written or "step 'a'" in written  # torch 2.15: apostrophes


# ---- item 13: rendering is linear: long names and notes are cut --------------------


def test_a_huge_note_and_layer_path_print_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 16 MB note (many lines) and a 20 MB layer path: the console report is a few
    KB and the HTML report a few hundred, with the cuts marked (before the cut, a 16 MB
    note took about 20 s to print)."""
    source = saved_profile(tmp_path, ops=False)
    doc = json.loads(source.read_text())
    long_path = "L" * 20_000_000
    for layer in doc["layers"]:
        if layer["path"] == "b\rc":
            layer["path"] = long_path
    doc["notes"] = ["n\n" * 8_000_000]
    source.write_text(json.dumps(doc))
    code = main(["report", str(source)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert len(out) < 200_000
    mark = re.escape(CUT_MARK).replace(r"\{\}", "([0-9]+)")
    cut = {int(n) for n in re.findall(mark, out)}
    assert any(16_000_000 - MAX_SHOWN <= n <= 16_000_000 for n in cut), cut  # the note
    assert 20_000_000 - MAX_SHOWN in cut  # the layer's name
    page = tmp_path / "r.html"
    assert main(["report", str(source), "--html", str(page), "-q"]) == 0
    assert page.stat().st_size < 4_000_000
    assert CUT_MARK.format(20_000_000 - MAX_SHOWN) in page.read_text()


# ---- the decisions: CSV formula cells, file bytes quoted in errors -------------------


def test_csv_names_that_start_like_a_formula_are_quoted() -> None:
    model = nn.Sequential()
    formulas = ["=HYPERLINK(1)", "+1", "-2", "@SUM(1)", "\tx"]
    for name in [*formulas, "plain-name"]:
        model.add_module(name, nn.Linear(4, 4))
    torch.manual_seed(0)
    profile = run_model(model, (torch.randn(2, 4),), {}, RunOptions(warmup=0, iters=1))
    rows = list(csv.DictReader(io.StringIO(profile_to_csv(profile))))
    paths = {r["path"] for r in rows}
    assert {f"'{f}" for f in formulas} <= paths and "plain-name" in paths
    assert not any(p.startswith(("=", "+", "-", "@", "\t")) for p in paths)


def test_errors_quote_at_most_eight_bytes_of_a_linked_file(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-TOKEN-0123456789abcdef\n")
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    os.symlink(secret, ranks / "a.rank-0.json")
    (ranks / "b.rank-1.json").write_bytes(files["trace"].read_bytes())
    code = main(["analyze", str(ranks)])
    _, err = capsys.readouterr()
    assert code == 2 and "b'SECRET-T'" in err and "SECRET-TO" not in err


def test_a_message_the_model_raises_is_shown_escaped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    code = main(
        ["run", "--arch", "tests.support.hostile_models:exits_with_escape", "--input", "2x4"]
    )
    _, err = capsys.readouterr()
    assert code == 2 and "bye\\x1b[2J\\u202e" in err and "\x1b" not in err, err
