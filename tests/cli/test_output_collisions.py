"""An output is never one of the command's inputs, nor another output's file (issue 34,
item 6): refused before anything is read or written, also through a link."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from layerprof.cli import main
from tests.support.html_subjects import PROFILES
from tests.support.paths import ROOT
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


# Inputs beside the main file (issue 43, item 13): @file inputs, the traces a directory
# or glob lists, the --arch module's own source. Each was replaced with exit 0.

NET = "tests.support.cli_models:Net"


@pytest.fixture
def batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import torch

    monkeypatch.chdir(ROOT)  # --arch tests.support.cli_models:Net is imported from here
    path = tmp_path / "x.pt"
    torch.save(torch.randn(2, 4), path)
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--arch", NET, "--input", "@{x}", "--csv", "{x}"],
        ["run", "--arch", NET, "--input", "x=@{x}", "--json", "{x}", "--repeat", "2"],
        ["sweep", "--arch", NET, "--input", "@{x}", "--batch", "1", "--json", "{x}"],
        ["diff", "--run", f"--arch {NET} --input 2x4", f"--arch {NET} --input @{{x}}",
         "--html", "{x}"],
    ],
    ids=["run", "run-repeat", "sweep", "diff-run"],
)  # fmt: skip
def test_an_input_file_is_an_input(
    batch: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    before = batch.read_bytes()
    line = refused(capsys, *(word.format(x=batch) for word in argv))
    assert f"{batch} is the input {batch}: writing it would replace what is read" in line
    assert batch.read_bytes() == before


def test_an_input_file_through_a_link_and_another_name(
    batch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.link(batch, tmp_path / "hard.csv")
    before = batch.read_bytes()
    line = refused(
        capsys, "run", "--arch", NET, "--input", f"@{batch}", "--csv", str(tmp_path / "hard.csv")
    )
    assert "is the input" in line
    assert batch.read_bytes() == before


def _module(folder: Path, name: str) -> Path:
    source = folder / f"{name}.py"
    source.write_text(
        "from torch import nn\n\ndef build():\n    return nn.Linear(4, 2)\n\n"
        "def loss(out):\n    return out.sum()\n"
    )
    return source


def test_the_arch_modules_own_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    source = _module(tmp_path, "lp_collide_arch")
    before = source.read_bytes()
    for spec in ("lp_collide_arch:build", f"{source}:build"):
        line = refused(capsys, "run", "--arch", spec, "--input", "2x4", "--json", str(source))
        assert f"--json {source} is the input" in line
    line = refused(
        capsys, "run", "--arch", "lp_collide_arch:build", "--input", "2x4", "--backward",
        "--loss", "lp_collide_arch:loss", "--html", "lp_collide_arch.py",
    )  # fmt: skip
    assert "is the input" in line
    assert source.read_bytes() == before
    assert "lp_collide_arch" not in sys.modules  # found, not imported


def test_a_package_modules_source_is_found_without_running_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    package = tmp_path / "lp_collide_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("open('ran', 'w').close()\n")
    source = _module(package, "nets")
    before = source.read_bytes()
    line = refused(
        capsys, "run", "--arch", "lp_collide_pkg.nets:build", "--input", "2x4", "--csv",
        str(source),
    )  # fmt: skip
    assert "is the input" in line
    assert source.read_bytes() == before
    assert not (tmp_path / "ran").exists()


def test_a_trace_a_directory_or_glob_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ranks = tmp_path / "job"
    ranks.mkdir()
    trace = cpu_trace(ranks / "t.rank-0.json")
    shutil.copyfile(trace, ranks / "t.rank-1.json")
    before = trace.read_bytes()
    for listed in (str(ranks), str(ranks / "*.json")):
        line = refused(capsys, "analyze", listed, "--json", str(trace))
        assert f"--json {trace} is the input {trace}" in line
        line = refused(capsys, "diff", listed, str(ranks / "t.rank-1.json"), "--html", str(trace))
        assert "is the input" in line
    assert trace.read_bytes() == before
