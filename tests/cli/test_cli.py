"""The command line as a user meets it: outputs, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from layerprof.cli import main
from tests.support.cli_models import Net
from tests.support.paths import ROOT


@pytest.fixture(autouse=True)
def _cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # --arch tests.support.cli_models:... is imported from the current dir


FAST = ["--warmup", "1", "--iters", "3"]
NET_RUN = ["run", "--arch", "tests.support.cli_models:Net", "--input", "2x4", *FAST]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *needles: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[0].startswith("layerprof: error: "), err
    assert "Traceback" not in err
    assert len(lines) <= 2  # the error and an optional hint
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_help_does_not_import_torch() -> None:
    code = (
        "import sys; from layerprof.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_demo_writes_json_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "demo", "--model", "cnn", *FAST, "--json", str(tmp_path / "d.json"),
        "--csv", str(tmp_path / "d.csv"),
    )  # fmt: skip
    assert code == 0
    assert "SmallCNN" in out and "latency median" in out
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["schema"] == "layerprof.profile/2"
    assert {"median", "mean", "p90", "p99", "min", "max", "std", "n", "first"} <= set(
        data["latency_ms"]
    )
    assert data["overhead"]["per_call_us"] > 0
    assert data["layers"][0]["path"] == "" and data["layers"][0]["parent"] is None
    csv_lines = (tmp_path / "d.csv").read_text().splitlines()
    assert csv_lines[0].startswith("path,type,parent")
    assert len(csv_lines) == len(data["layers"]) + 1


def test_run_arch_only_with_kwargs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "run", "--arch", "tests.support.cli_models:Net", "--arch-kwargs", '{"width": 16}',
        "--input", "2x4", *FAST, "--top", "2",
    )  # fmt: skip
    assert code == 0, out
    assert "top by self time" in out


def test_run_state_dict_and_keyword_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.cli_models import TwoInputs

    torch.save({"model_state_dict": TwoInputs().state_dict()}, tmp_path / "ckpt.pt")
    code, out, err = run_cli(
        capsys, "run", str(tmp_path / "ckpt.pt"), "--arch", "tests.support.cli_models:TwoInputs",
        "--input", "ids=4x16:int64[0,100)", "--input", "mask=4x16:bool", *FAST,
    )  # fmt: skip
    assert code == 0, err
    assert "embed" in out


def test_wrong_keys_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sd = Net().state_dict()
    sd["extra.weight"] = torch.zeros(1)
    del sd["fc1.bias"]
    torch.save(sd, tmp_path / "bad.pth")
    code, _, err = run_cli(
        capsys,
        "run",
        str(tmp_path / "bad.pth"),
        "--arch",
        "tests.support.cli_models:Net",
        "--input",
        "2x4",
    )
    assert code == 2
    assert "fc1.bias" in err and "extra.weight" in err and "Traceback" not in err


def test_bad_input_shape_names_layer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "out.json"
    code, _, err = run_cli(
        capsys,
        "run",
        "--arch",
        "tests.support.cli_models:Net",
        "--input",
        "2x5",
        *FAST,
        "--json",
        str(out_file),
    )
    assert code == 2
    assert_one_line_error(err, "fc1 (Linear)", "mat1 and mat2 shapes cannot be multiplied")
    assert not out_file.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (
            ["run", "missing.pth", "--arch", "tests.support.cli_models:Net", "--input", "2x4"],
            ["missing.pth"],
        ),
        (["run", "--arch", "nope.nothing:Net", "--input", "2x4"], ["nope.nothing"]),
        (
            ["run", "--arch", "tests.support.cli_models:not_a_module", "--input", "2x4"],
            ["not_a_module"],
        ),
        (["run", "--arch", "tests.support.cli_models:Net", "--input", "2xQ"], ["2xQ"]),
        (
            [
                "run",
                "--arch",
                "tests.support.cli_models:Net",
                "--input",
                "2x4",
                "--arch-kwargs",
                "{bad",
            ],
            ["--arch-kwargs"],
        ),
        (["report", "nothing-here.json"], ["nothing-here.json"]),
    ],
)
def test_bad_input_one_line(
    argv: list[str], needles: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert_one_line_error(err, *needles)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_absent(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(
        capsys,
        "run",
        "--arch",
        "tests.support.cli_models:Net",
        "--input",
        "2x4",
        "--device",
        "cuda",
    )
    assert code == 2
    assert_one_line_error(err, "--device cuda", "CUDA is not available")


def test_not_a_torch_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "notes.pth"
    f.write_text("hello")
    code, _, err = run_cli(
        capsys, "run", str(f), "--arch", "tests.support.cli_models:Net", "--input", "2x4"
    )
    assert code == 2
    assert_one_line_error(err, "notes.pth")


def test_pickled_module_needs_trust(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save(Net(), tmp_path / "whole.pt")
    code, _, err = run_cli(capsys, "run", str(tmp_path / "whole.pt"), "--input", "2x4", *FAST)
    assert code == 2 and "--trust-pickle" in err
    code, out, err = run_cli(
        capsys, "run", str(tmp_path / "whole.pt"), "--trust-pickle", "--input", "2x4", *FAST
    )
    assert code == 0, err
    assert "fc1" in out


def test_torchscript_per_layer_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.jit.save(torch.jit.script(Net()), tmp_path / "net.ts")
    out_json = tmp_path / "p.json"
    code, out, err = run_cli(
        capsys, "run", str(tmp_path / "net.ts"), "--input", "2x4", *FAST, "--json", str(out_json)
    )
    assert code == 0, err
    assert "latency median" in out
    paths = {layer["path"] for layer in json.loads(out_json.read_text())["layers"]}
    assert {"", "fc1", "block2", "block2.1"} <= paths


def test_exported_program_per_layer_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = torch.export.export(Net(), (torch.randn(2, 4),))
    torch.export.save(program, tmp_path / "net.pt2")
    out_json = tmp_path / "p.json"
    code, _, err = run_cli(
        capsys, "run", str(tmp_path / "net.pt2"), "--input", "2x4", *FAST, "--json", str(out_json)
    )
    assert code == 0, err
    layers = {layer["path"]: layer for layer in json.loads(out_json.read_text())["layers"]}
    assert layers["fc1"]["type"] == "Linear" and layers["fc1"]["calls"] == 1


def test_ops_mode_with_exports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, *NET_RUN, "--ops",
        "--backward", "--trace", str(tmp_path / "t" / "trace.json.gz"),
        "--stacks", str(tmp_path / "s.folded"), "--speedscope", str(tmp_path / "s.speedscope.json"),
        "--json", str(tmp_path / "p.json"),
    )  # fmt: skip
    assert code == 0, err
    assert "operators in fc1" in out and "aten::addmm" in out
    assert "backward operators" in out
    assert (tmp_path / "t" / "trace.json.gz").stat().st_size > 0
    assert (tmp_path / "s.folded").read_text().strip()
    data = json.loads((tmp_path / "p.json").read_text())
    assert any(o["layer"] == "fc1" and o["name"] == "aten::addmm" for o in data["ops"])
    assert any(o.get("phase") == "backward" for o in data["ops"])
    assert "backward_total_ms" in {k for layer in data["layers"] for k in layer}


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--trace", "x.json"], "--trace needs --ops"),
        (["--ops", "--schedule", "1,2"], "--schedule"),
    ],
)
def test_ops_flag_errors(flags: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, *NET_RUN, *flags)
    assert code == 2
    assert_one_line_error(err, needle)


def test_report_rerenders_saved_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_cli(
        capsys,
        *NET_RUN,
        "--json",
        str(tmp_path / "p.json"),
    )
    code, out, _ = run_cli(
        capsys, "report", str(tmp_path / "p.json"), "--csv", str(tmp_path / "p.csv")
    )
    assert code == 0
    assert "fc1" in out and (tmp_path / "p.csv").exists()


def test_report_rejects_non_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "x.json"
    f.write_text('{"hello": 1}')
    code, _, err = run_cli(capsys, "report", str(f))
    assert code == 2
    assert_one_line_error(err, "x.json", "not a layerprof profile")


def test_unwritable_output_is_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run_cli(
        capsys,
        *NET_RUN,
        "--json",
        str(blocker / "p.json"),
    )
    assert code == 2
    assert_one_line_error(err, "p.json")


def test_analyze_diff_report_do_not_import_torch(tmp_path: Path) -> None:
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0.0, "dur": 100.0, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10.0, "dur": 50.0, "pid": 1, "tid": 1},
        ]
    }  # fmt: skip
    (tmp_path / "t.json").write_text(json.dumps(trace))
    from tests.support.profiles import fake_profile

    fake_profile().save(tmp_path / "p.json")
    code = (
        "import sys\n"
        "from layerprof.cli import main\n"
        f"d = {str(tmp_path)!r}\n"
        "assert main(['analyze', d + '/t.json', '-q', '--json', d + '/a.json']) == 0\n"
        "assert main(['report', d + '/p.json', '-q', '--html', d + '/r.html']) == 0\n"
        "assert main(['diff', d + '/p.json', d + '/p.json', '--format', 'json']) == 0\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_a_terminal_report_of_a_trace_creates_no_other_types_nor_the_codec(
    tmp_path: Path,
) -> None:
    """``layerprof analyze``'s start-up (issue: the whole process near the floor of
    reading the JSON): a trace's terminal report needs neither the codec nor the types
    of a diff, a sweep, a compiled run, a generate or a training loop (on Python 3.11
    each frozen dataclass costs ~1 ms to create)."""
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": 200.0 * i, "dur": 100.0, "pid": 1, "tid": 1}
            for i in range(3)
        ]
        + [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10.0, "dur": 50.0, "pid": 1, "tid": 1}]
    }  # fmt: skip
    (tmp_path / "t.json").write_text(json.dumps(trace))
    unwanted = [
        "layerprof.codec", "layerprof.pivot.diff", "layerprof.pivot.sections.sweep",
        "layerprof.pivot.sections.compiled", "layerprof.pivot.sections.generation",
        "layerprof.pivot.sections.loop",
    ]  # fmt: skip
    code = (
        "import contextlib, io, sys\n"
        "from layerprof.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    assert main(['analyze', {str(tmp_path / 't.json')!r}]) == 0\n"
        "assert 'aten::mm' in out.getvalue()\n"
        f"print([m for m in {unwanted!r} if m in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_bad_output_path_fails_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = run_cli(
        capsys, *NET_RUN,
        "--json", str(tmp_path / "ok.json"), "--csv", str(blocker / "x.csv"),
    )  # fmt: skip
    assert code == 2
    assert_one_line_error(err, "x.csv", "is not a directory")
    assert out == ""  # nothing was measured or printed
    assert not (tmp_path / "ok.json").exists()


def test_output_names_with_suffixes() -> None:
    from layerprof.cli.outputs import with_suffix

    assert with_suffix("out/report.html", "cnn") == Path("out/report.cnn.html")
    assert with_suffix("t.json.gz", "cnn") == Path("t.cnn.json.gz")
    assert with_suffix("s.speedscope.json", "cnn") == Path("s.cnn.speedscope.json")
    assert with_suffix("plain", "cnn") == Path("plain.cnn")
    assert with_suffix("p.json", None) == Path("p.json")


def test_under_torchrun_files_carry_the_rank_and_only_rank_0_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("LOCAL_RANK", rank)
        code, out, err = run_cli(
            capsys, *NET_RUN,
            "--json", str(tmp_path / "p.json"),
        )  # fmt: skip
        assert code == 0, err
        assert ("latency median" in out) == (rank == "0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.rank-0.json", "p.rank-1.json"]


def test_ops_profile_memory_and_op_sort(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys,
        *NET_RUN,
        "--ops",
        "--profile-memory",
        "--op-sort",
        "name",
        "--json",
        str(tmp_path / "p.json"),
    )
    assert code == 0, err
    layers = {
        layer["path"]: layer for layer in json.loads((tmp_path / "p.json").read_text())["layers"]
    }
    assert layers["fc1"]["peak_bytes"] >= 2 * 8 * 4  # its output, at least
    flat = out[out.index("operators (all layers)") :]
    table = flat[: flat.index("operators in")].split("\n")  # the flat table only
    names = [ln.split("│")[0].strip() for ln in table if ln.startswith("aten::")]
    assert names == sorted(names)


def test_exported_program_runs_on_its_example_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.export.save(torch.export.export(Net(), (torch.randn(3, 4),)), tmp_path / "net.pt2")
    code, out, err = run_cli(capsys, "run", str(tmp_path / "net.pt2"), *FAST)
    assert code == 0, err
    assert "float32[3, 4] (exported example)" in out


@pytest.mark.parametrize("command", ["report", "diff"])
def test_a_closed_pipe_ends_quietly(tmp_path: Path, command: str) -> None:
    """`layerprof report p.json | head -1`: no made-up error, the exit of a tool
    stopped by SIGPIPE (rich turns the closed stdout into SystemExit(1))."""
    from tests.support.profiles import fake_profile

    path = tmp_path / "p.json"
    fake_profile().save(path)
    args = [str(path)] if command == "report" else [str(path), str(path)]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line, as after head -1
    try:
        result = subprocess.run(
            [sys.executable, "-m", "layerprof", command, *args],
            stdout=write_end, stderr=subprocess.PIPE, cwd=ROOT, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert result.returncode == 141, result.stderr
    assert result.stderr == b""


def test_a_bad_loss_spec_names_the_loss_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*NET_RUN, "--backward", "--loss", "tests.support.cli_models:nope"])
    err = capsys.readouterr().err
    assert code == 2
    assert (
        "--loss tests.support.cli_models:nope: module 'tests.support.cli_models' has no attribute"
        in err
    )
    assert "--arch tests.support.cli_models:nope" not in err


def test_diff_quiet_prints_only_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.profiles import fake_profile

    path = tmp_path / "p.json"
    fake_profile().save(path)
    capsys.readouterr()
    assert main(["diff", str(path), str(path), "-q", "--fail-above", "5%"]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("layerprof: ") and len(err.strip().splitlines()) == 1


# ---- diff --run: what a new user typed -------------------------------------------------


def test_rounds_without_run_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--rounds`` on two saved files was ignored without a word."""
    code, _, _ = run_cli(capsys, *NET_RUN, "-q", "--json", str(tmp_path / "p.json"))
    assert code == 0
    saved = str(tmp_path / "p.json")
    code, _, err = run_cli(capsys, "diff", saved, saved, "--rounds", "4")
    assert code == 2
    assert_one_line_error(err, "--rounds is for --run")


@pytest.mark.parametrize("option", ["--json", "--html=x.html", "--tensorboard"])
def test_outputs_inside_a_run_string_are_refused(
    capsys: pytest.CaptureFixture[str], option: str
) -> None:
    """An output option in BASE/NEW was written by no one (diff keeps the children's
    profiles), and the run still exited 0."""
    spec = "--arch tests.support.cli_models:Net --input 2x4"
    code, _, err = run_cli(capsys, "diff", "--run", f"{spec} {option} o", spec, "--rounds", "2")
    assert code == 2
    assert_one_line_error(err, "diff --run BASE", option.split("=")[0], "decided by diff")


def test_quiet_diff_says_nothing_but_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``diff DIR DIR -q`` printed 'comparing rank 0 of 2' twice before the verdict."""
    from tests.support.rank_traces import cpu_trace, simulate_ranks

    one = cpu_trace(tmp_path / "one.json", steps=3)
    simulate_ranks(one, tmp_path / "ranks", 2)
    ranks = str(tmp_path / "ranks")
    code, out, err = run_cli(capsys, "diff", ranks, ranks, "-q", "--fail-above", "5%")
    assert code == 0 and out == ""
    assert "comparing rank" not in err
