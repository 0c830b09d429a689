"""The child processes of ``run --repeat`` and ``diff --run`` (issue 34, items 1, 3, 4, 5, 10):
no code from the current directory runs in them, options the gate owns are refused by
their parsed destination, a failed child is described as it failed, an oversized
command line is a usage error, and a hanging side is stopped by its time limit.

Fake children are small Python programs (no torch): the machinery, in milliseconds.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from layerprof.cli import main, processes
from layerprof.errors import UsageError
from tests.support.paths import ROOT

SPEC = "--arch tests.support.cli_models:Net --input 2x4 --warmup 0 --iters 2"


@pytest.fixture
def fake_child(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Children run ``code[0]`` (a Python program) instead of ``layerprof run``; the
    output path is its last argument."""
    code = ["pass"]

    def command(argv: object, out: Path) -> list[str]:
        return [sys.executable, "-c", code[0], str(out)]

    monkeypatch.setattr(processes, "child_command", command)
    return code


@pytest.mark.parametrize(
    ("program", "said"),
    [
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "was killed by SIGKILL"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "was killed by SIGSEGV"),
        ("import os; os._exit(0)", "ended (exit 0) without writing its profile"),
        ("import sys; sys.exit(4)", "failed (exit 4); its error is printed above"),
    ],
)
def test_a_failed_child_is_described_as_it_failed(
    fake_child: list[str], tmp_path: Path, program: str, said: str
) -> None:
    fake_child[0] = program
    with pytest.raises(processes.ChildFailed) as exc:
        processes.repeat(["run"], 2)
    assert str(exc.value) == f"run 1 of 2 {said}" + (
        " and wrote no profile" if "killed" in said else ""
    )
    assert "\n" not in str(exc.value)
    assert exc.value.exit_code >= 1


def test_child_outcome_names_signals_it_does_not_know() -> None:
    assert processes.child_outcome(-signal.SIGTERM, wrote=False).startswith("was killed by SIGTERM")
    assert "signal 99" in processes.child_outcome(-99, wrote=False)


def test_a_hanging_side_is_stopped_by_its_time_limit(fake_child: list[str]) -> None:
    fake_child[0] = "import time; time.sleep(60)"
    with pytest.raises(processes.ChildTimedOut) as exc:
        processes.interleave(["run"], ["run"], 2, timeout=0.5)
    assert (
        str(exc.value) == "the base run of round 1 ran past its time limit of 0.5 s and was stopped"
    )
    assert "--round-timeout" in (exc.value.hint or "")


def test_round_timeout_reaches_the_rounds(
    fake_child: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake_child[0] = "import time; time.sleep(60)"
    code = main(["diff", "--run", SPEC, SPEC, "--rounds", "2", "--round-timeout", "0.3", "-q"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("layerprof: error: the base run of round 1 ran past its time limit")


@pytest.mark.parametrize(
    ("extra", "refused"),
    [
        ("--js x.json", "--json"),  # a prefix argparse accepts
        ("--htm=x.html", "--html"),
        ("--csv=-", "--csv"),
        ("--repeat 3", "--repeat"),
        ("--rep=3", "--repeat"),
        ("--child-out y.json", "--child-out"),
        ("--trace t.json.gz --ops", "--trace"),
    ],
)
def test_options_the_gate_owns_are_refused_by_destination(
    extra: str, refused: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["diff", "--run", f"{SPEC} {extra}", SPEC, "--rounds", "2"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"layerprof: error: diff --run BASE: {refused} is decided by diff")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ("-h", "diff --run NEW: -h/--help would print run's help instead of running"),
        ("--bogus", "diff --run NEW: unrecognized arguments: --bogus"),
        ("--iters nope", "diff --run NEW: argument --iters"),
    ],
)
def test_a_side_run_would_not_parse_is_one_line(
    extra: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["diff", "--run", SPEC, f"{SPEC} {extra}", "--rounds", "2"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"layerprof: error: {said}"), err
    assert "Traceback" not in err and "usage:" not in err


@pytest.mark.parametrize("text", ["x" * 200_000, "w " * 300_000])
def test_an_oversized_run_string_is_a_usage_error(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["diff", "--run", text, SPEC, "--rounds", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("layerprof: error: diff --run BASE is ")
    assert "characters long; at most" in err and "internal error" not in err


def test_check_argv_refuses_before_starting() -> None:
    with pytest.raises(UsageError, match="run 1 of 2 is 200"):
        processes.check_argv(["x" * 200_000], "run 1 of 2")


def test_the_child_boot_takes_the_current_directory_off_the_path(tmp_path: Path) -> None:
    """The boot itself, without torch: a planted numpy.py and layerprof.py never run."""
    marker = tmp_path / "ran"
    for name in ("numpy.py", "layerprof.py", "rich.py"):
        (tmp_path / name).write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    done = subprocess.run(
        [sys.executable, "-c", processes.CHILD_BOOT, "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("layerprof ")
    assert not marker.exists()


@pytest.mark.slow
def test_planted_modules_beside_a_model_file_do_not_run_in_repeats(tmp_path: Path) -> None:
    """Issue 34, item 1 end to end: a torch.export file beside a torch.py and a
    layerprof.py, profiled with --repeat 2 (two real children)."""
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    program = torch.export.export(model, (torch.randn(2, 4),))
    torch.export.save(program, tmp_path / "m.pt2")
    marker = tmp_path / "ran"
    for name in ("torch.py", "layerprof.py", "numpy.py"):
        (tmp_path / name).write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    # the parent starts as the console script does (no current directory on the path)
    done = subprocess.run(
        [sys.executable, "-c", processes.CHILD_BOOT, "run", "m.pt2", "--input", "2x4",
         "--warmup", "0", "--iters", "2", "--repeat", "2", "-q", "--json", "p.json"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "p.json").exists()
    assert not marker.exists(), marker.read_text()
