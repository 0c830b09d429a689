"""Outputs on the command line: ``-`` for standard output, and inputs never taken for outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from layerprof.cli import build_parser, main
from tests.support.paths import ROOT

FAST = ["--warmup", "1", "--iters", "3"]
NET_RUN = ["run", "--arch", "tests.support.cli_models:Net", "--input", "2x4", *FAST]


@pytest.fixture(autouse=True)
def _cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("layerprof: error: "), err
    assert "Traceback" not in err and len(lines) <= 2, err
    return lines[0]


# ---------------------------------------------------------------- - is stdout


@pytest.mark.parametrize("flag", ["--json", "--csv", "--html", "--stacks", "--speedscope"])
def test_output_to_stdout_keeps_the_report_off_it(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    code, out, err = run_cli(capsys, *NET_RUN, flag, "-")
    assert code == 0, err
    assert "latency median" in err  # the report went to stderr
    assert "latency median" not in out and "wrote" not in err
    if flag == "--json":
        assert json.loads(out)["schema"] == "layerprof.profile/2"
    elif flag == "--csv":
        assert out.startswith("path,type,parent")
    elif flag == "--html":
        assert out.lstrip().lower().startswith("<!doctype html")
    elif flag == "--speedscope":
        assert "speedscope" in json.loads(out)["$schema"]
    else:
        assert out.splitlines()[0].startswith("Net")


def test_trace_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *NET_RUN, "--ops", "--trace", "-", "--quiet")
    assert code == 0, err
    assert json.loads(out)["traceEvents"]


def test_at_most_one_output_on_stdout(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run_cli(capsys, *NET_RUN, "--json", "-", "--csv", "-")
    assert code == 2 and out == ""
    assert "--json and --csv would all write to standard output" in one_line_error(err)


def test_tensorboard_cannot_be_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, *NET_RUN, "--ops", "--tensorboard", "-")
    assert code == 2
    assert "--tensorboard takes a directory" in one_line_error(err)


def test_demo_of_two_models_cannot_share_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "demo", *FAST, "--json", "-")
    assert code == 2
    assert "2 models would write" in one_line_error(err)


def test_torchrun_ranks_cannot_share_stdout(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    code, _, err = run_cli(capsys, *NET_RUN, "--json", "-")
    assert code == 2
    assert "every torchrun rank" in one_line_error(err)


def test_diff_json_to_stdout(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    assert run_cli(capsys, *NET_RUN, "--json", str(base), "-q")[0] == 0
    code, out, err = run_cli(capsys, "diff", str(base), str(base), "--json", "-")
    assert code == 0, err
    assert json.loads(out)["schema"] == "layerprof.diff/1"
    code, out, err = run_cli(capsys, "diff", str(base), str(base), "--json", "-", "--format", "md")
    assert code == 2 and out == ""
    assert "--json and --format md would all write" in one_line_error(err)


def test_help_says_where_the_report_goes(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "demo", "analyze", "diff", "report"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "FILE may be - for standard output" in text, command
        assert "console report then goes to standard error" in text, command


# ------------------------------------------------------- inputs are not outputs


def _profiled_dir(directory: Path, workers: list[str]) -> None:
    """What torch.profiler.tensorboard_trace_handler writes for several workers."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(4, 8)
    for worker in workers:
        handler = torch.profiler.tensorboard_trace_handler(str(directory), worker_name=worker)
        schedule = torch.profiler.schedule(wait=0, warmup=1, active=2)
        with torch.profiler.profile(schedule=schedule, on_trace_ready=handler) as prof:
            for _ in range(3):
                model(x)
                prof.step()


def test_analyze_tensorboard_handler_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    _profiled_dir(runs, ["node1_4242", "node1_4243"])  # handler's default name: host_pid
    assert len(list(runs.glob("*.pt.trace.json"))) == 2
    code, out, err = run_cli(capsys, "analyze", str(runs), "--json", str(tmp_path / "a.json"))
    assert code == 0, err
    assert len(json.loads((tmp_path / "a.json").read_text())["ranks"]) == 2
    # CPU-only ranks have no kernel time: the per-rank table leaves it out (no 0.000 ms
    # "compute" beside a step breakdown whose compute is most of the step)
    words = " ".join(out.split())  # the table's title wraps to its width
    assert "per rank (no device kernels: see the step breakdown)" in words
    assert "kernel compute ms" not in words


def test_analyze_directory_layerprof_wrote_under_torchrun(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "tb"
    for rank in (0, 1):  # as torchrun --nproc-per-node 2 would set them
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        code, _, err = run_cli(capsys, *NET_RUN, "--ops", "--tensorboard", str(runs), "-q")
        assert code == 0, err
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name)
    assert len(list(runs.iterdir())) == 2
    code, _, err = run_cli(capsys, "analyze", str(runs), "--json", str(tmp_path / "a.json"))
    assert code == 0, err
    data = json.loads((tmp_path / "a.json").read_text())
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert data["rank_source"].startswith("file name")


def test_analyze_input_in_read_only_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ro = tmp_path / "mnt"
    _profiled_dir(ro, ["host_1"])
    trace = next(ro.iterdir())
    ro.chmod(0o555)
    real_access = os.access
    # Root may write anywhere but on a read-only mount: make this one look like that.
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if str(p).startswith(str(ro)) and mode & os.W_OK
        else real_access(p, mode),
    )  # fmt: skip
    try:
        for target in (ro, trace):
            code, _, err = run_cli(capsys, "analyze", str(target), "-q")
            assert code == 0, err
    finally:
        ro.chmod(0o755)


def test_analyze_missing_input_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "a" / "b" / "t.json"
    code, _, err = run_cli(capsys, "analyze", str(missing))
    assert code == 2
    assert str(missing) in one_line_error(err)
    assert not (tmp_path / "a").exists()


def test_output_checks_see_only_outputs() -> None:
    from layerprof.cli.outputs import given

    parser = build_parser()
    args = parser.parse_args(["analyze", "some/dir", "--json", "a.json"])
    assert given(args) == {"json": "a.json"}
    args = parser.parse_args([*NET_RUN, "--ops", "--trace", "t.json", "--tensorboard", "tb"])
    assert given(args) == {"trace": "t.json", "tensorboard": "tb"}
