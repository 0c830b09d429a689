"""An output is never one of the command's inputs, nor another output's file (issue 34,
item 6): refused before anything is read or written, also through a link."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from layerprof.cli import main
from tests.support.html_subjects import PROFILES
from tests.support.rank_traces import cpu_trace


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "p.json"
    shutil.copyfile(PROFILES / "hooks.json", path)
    return path


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.splitlines()) == 2 and "internal error" not in err, err
    return err.splitlines()[0]


@pytest.mark.parametrize("option", ["--html", "--csv"])
def test_report_over_its_own_input(
    saved: Path, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = saved.read_bytes()
    line = refused(capsys, "report", str(saved), option, str(saved))
    assert line == (
        f"layerprof: error: {option} {saved} is the input {saved}:"
        " writing it would replace what is read"
    )
    assert saved.read_bytes() == before


def test_diff_over_its_baseline(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = saved.with_name("n.json")
    shutil.copyfile(saved, other)
    before = saved.read_bytes()
    line = refused(capsys, "diff", str(saved), str(other), "--json", str(saved))
    assert "--json" in line and "is the input" in line
    assert saved.read_bytes() == before


def test_through_a_symbolic_and_a_hard_link(
    saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sym.html").symlink_to(saved)
    os.link(saved, tmp_path / "hard.html")
    before = saved.read_bytes()
    for name in ("sym.html", "hard.html"):
        line = refused(capsys, "report", str(saved), "--html", str(tmp_path / name))
        assert "is the input" in line
    # and the other way round: the input named through the link
    line = refused(capsys, "report", str(tmp_path / "sym.html"), "--csv", str(saved))
    assert "is the input" in line
    assert saved.read_bytes() == before


def test_analyze_over_its_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = cpu_trace(tmp_path / "t.json")
    before = trace.read_bytes()
    line = refused(capsys, "analyze", str(trace), "--json", str(trace))
    assert "is the input" in line
    assert trace.read_bytes() == before


@pytest.mark.parametrize(("first", "second"), [("x.html", "x.html"), ("x.html", "sub/../x.html")])
def test_two_outputs_on_one_file(
    saved: Path, tmp_path: Path, first: str, second: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sub").mkdir()
    line = refused(
        capsys, "report", str(saved), "--csv", str(tmp_path / first), "--html",
        str(tmp_path / second),
    )  # fmt: skip
    assert line.startswith("layerprof: error: --csv and --html would both write ")
    assert not (tmp_path / "x.html").exists()


def test_distinct_outputs_still_write(
    saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["report", str(saved), "--csv", str(tmp_path / "x.csv"), "--html",
                 str(tmp_path / "x.html")])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "x.csv").exists() and (tmp_path / "x.html").exists()
