"""Names from profiles and traces reach the terminal as text, never as commands.

A module, op, kernel, thread or file name may hold an ESC sequence (clear the
screen, set the window title, move the cursor), a carriage return, or text that
rich would read as markup (``[bold]``, ``[splits_dist]_[sparse_arch_ebc]``).
``report``, ``analyze`` and ``diff`` are run through ``main()`` on such files.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text
from torch import nn

from layerprof.capture.options import OpOptions, RunOptions
from layerprof.capture.runner import run_model
from layerprof.cli import main
from layerprof.pivot.notes import Note
from layerprof.render.console.profile import print_profile
from layerprof.render.terminal import SafeConsole, escape_controls, escaping, make_console
from layerprof.traceformat import STEP_PREFIX

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;title\x07"
CSI_C1 = "\x9b31m"  # the one-byte CSI of C1
MARKUP = "[bold]x[/bold]"
BRACKETS = "[splits_dist]_[sparse_arch_ebc]"
HOSTILE = (CLEAR, TITLE, "a\rb", MARKUP, BRACKETS, CSI_C1, "del\x7f")

# Anything a terminal acts on: C0 (but newline), DEL, C1.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
SGR = re.compile("\x1b\\[[0-9;]*m")


def assert_inert(text: str, shown: str = "\\x1b") -> None:
    """No control character at all (a pipe gets no colour codes either), the names
    are shown literally, and an escaped control character is readable (``shown``;
    the trace reader itself turns C0 characters in names into ``?``)."""
    assert not CONTROL.search(text), repr(CONTROL.search(text))
    assert MARKUP in text and BRACKETS in text
    assert shown in text


class Doubler(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def hostile_model() -> nn.Module:
    """Module names (and one class name) made of the hostile strings."""
    evil_class = type(f"Evil{CLEAR}{MARKUP}", (Doubler,), {})
    model = nn.Sequential()
    for i, name in enumerate(HOSTILE):
        model.add_module(name, nn.Linear(4, 4) if i % 2 else evil_class())
    model.add_module(BRACKETS + "_block", nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    return model


def hostile_profile_json(tmp_path: Path, name: str, *, ops: bool = True) -> Path:
    """A saved profile of the hostile model, ops mode, with op names and notes
    edited to hostile strings as a file from elsewhere may have them."""
    torch.manual_seed(0)
    opts = RunOptions(
        warmup=0, iters=2, model_name=f"net {TITLE}{MARKUP}", ops=OpOptions() if ops else None
    )
    profile = run_model(hostile_model(), (torch.randn(2, 4),), {}, opts)
    profile = profile.with_notes(Note("test", f"note {CLEAR} {BRACKETS}"))
    path = profile.save(tmp_path / name)
    data = json.loads(path.read_text())
    for i, op in enumerate(data.get("ops", [])):
        op["name"] = f"{HOSTILE[i % len(HOSTILE)]}::op{i}"
    data["meta"]["inputs"] = [f"x {CSI_C1} {MARKUP}"]
    path.write_text(json.dumps(data))
    return path


def span(cat: str, name: str, ts: float, dur: float, tid: Any = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def hostile_trace(directory: Path, name: str, *, slower: float = 1.0) -> Path:
    """Two profiler steps on one thread named with hostile strings: module spans,
    ops and GPU kernels with hostile names (times in µs)."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": f"main{CLEAR}"}},
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"proc{TITLE}"}},
    ]
    for step in range(2):
        t0 = 100.0 + 200 * step
        corr = 10 * step
        events += [
            span("user_annotation", f"{STEP_PREFIX}{step}", t0, 150 * slower),
            span("python_function", f"nn.Module: {BRACKETS}_0", t0 + 5, 100 * slower),
            span("python_function", f"nn.Module: Evil{CLEAR}_0", t0 + 10, 60 * slower),
            span("cpu_op", f"aten::{MARKUP}", t0 + 12, 40 * slower, **{"External id": corr}),
            span("cpu_op", f"op{TITLE}", t0 + 60, 10 * slower, **{"External id": corr + 1}),
            span("cuda_runtime", "cudaLaunchKernel", t0 + 15, 5, correlation=corr),
            {"ph": "X", "cat": "kernel", "name": f"kernel{CSI_C1}{BRACKETS}", "pid": 0,
             "tid": 7, "ts": t0 + 25, "dur": 20 * slower,
             "args": {"device": 0, "stream": 7, "correlation": corr}},
            span("user_annotation", f"region a\rb {BRACKETS}", t0 + 80, 20 * slower),
        ]  # fmt: skip
    path = directory / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return out + err


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("hostile")
    return hostile_profile_json(tmp, "a.json"), hostile_profile_json(tmp, "b.json")


def test_report_prints_hostile_names_inertly(
    profiles: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    text = run(capsys, "report", str(profiles[0]))
    assert_inert(text)
    assert "::op0" in text  # the operator tables were printed
    assert "\\x1b]0;title\\x07" in text and "a\\rb" in text and "\\x9b31m" in text


def test_diff_prints_hostile_names_inertly(
    profiles: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert_inert(run(capsys, "diff", str(profiles[0]), str(profiles[1]), "--threshold", "0%"))


def test_diff_markdown_has_no_control_characters(
    profiles: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    text = run(capsys, "diff", str(profiles[0]), str(profiles[1]), "--format", "md")
    assert not CONTROL.search(text), repr(CONTROL.search(text))
    assert "\\x1b[2J" in text


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    # the file name is hostile too: it is printed in the header and the rank rule
    directory = tmp_path / f"run {BRACKETS}"
    directory.mkdir()
    return directory


def test_analyze_prints_hostile_names_inertly(
    trace_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = hostile_trace(trace_dir, f"t{CLEAR}.json")
    text = run(capsys, "analyze", str(path))
    assert_inert(text, "\\x9b31m")
    assert f"kernel\\x9b31m{BRACKETS}" in text  # the kernel table


def test_trace_diff_prints_hostile_names_inertly(
    trace_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = hostile_trace(trace_dir, "base.json")
    new = hostile_trace(trace_dir, f"new{CLEAR}.json", slower=1.5)
    assert_inert(run(capsys, "diff", str(base), str(new)), "new\\x1b[2J")


def test_in_a_terminal_only_our_own_colour_codes_are_written(
    profiles: tuple[Path, Path], trace_dir: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """With colour on, every ESC in the output starts one of rich's SGR codes."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that no name is abbreviated
    monkeypatch.delenv("NO_COLOR", raising=False)
    trace = hostile_trace(trace_dir, "t.json")
    for argv, shown in ((["report", str(profiles[0])], "\\x1b"),
                        (["analyze", str(trace)], "\\x9b"),
                        (["diff", str(profiles[0]), str(profiles[1])], "\\x1b")):  # fmt: skip
        text = run(capsys, *argv)
        assert SGR.search(text), "colour is on"
        assert_inert(SGR.sub("", text), shown)


def test_errors_name_the_file_inertly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"x{CLEAR}.json"
    path.write_text('{"hello": 1}')
    code = main(["report", str(path)])
    _, err = capsys.readouterr()
    assert code == 2 and not CONTROL.search(err) and "x\\x1b[2J.json" in err


# ---- the console itself -----------------------------------------------------------


def test_make_console_escapes_whatever_is_printed() -> None:
    """The one place: text printed straight to the CLI's console, even a markup
    string and a Text with ESC in it, comes out escaped and literal."""
    console = make_console()
    assert isinstance(console, SafeConsole)
    console.file = io.StringIO()
    console.print(f"{MARKUP} {CLEAR}")
    console.print(Text(f"{TITLE} {BRACKETS}", style="bold"))  # rich's Text drops BEL itself
    out = console.file.getvalue()
    assert not CONTROL.search(out)
    assert MARKUP in out and BRACKETS in out and "\\x1b[2J" in out and "\\x1b]0;title" in out


def test_library_consoles_get_the_hook_for_one_report_only() -> None:
    """print_profile on a user's own console (markup on) escapes names and leaves
    the console as it was."""
    buf = io.StringIO()
    console = Console(file=buf, width=120, color_system=None)
    prof = hostile_profile_json_free()
    with escaping(console):
        console.print(Text(CLEAR))
    print_profile(prof, console=console)
    console.print(Text("after\x1b[0m"))  # not ours to escape any more
    out = buf.getvalue()
    before, _, after = out.rpartition("after")
    assert not CONTROL.search(before) and BRACKETS in before
    assert "\x1b[0m" in after


def hostile_profile_json_free() -> Any:
    torch.manual_seed(0)
    opts = RunOptions(warmup=0, iters=1, model_name=BRACKETS)
    return run_model(hostile_model(), (torch.randn(2, 4),), {}, opts)


@given(st.text())
def test_escape_controls_leaves_no_control_and_keeps_the_rest(text: str) -> None:
    escaped = escape_controls(text)
    assert not re.search("[\x00-\x1f\x7f-\x9f]", escaped)
    assert escape_controls(escaped) == escaped  # idempotent: safe to apply twice
    if not re.search("[\x00-\x1f\x7f-\x9f]", text):
        assert escaped == text
