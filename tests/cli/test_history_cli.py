"""``layerprof history``: saved profiles in, change points, the check's exit codes, the
page and the exports out; bad files refused in one line. No torch is measured here
(the profiles are built from known costs); the slow test runs real processes."""

from __future__ import annotations

import csv
import json
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from layerprof.cli import main
from layerprof.pivot.sections.repeats import Repeats, RunMedians
from tests.support.history_runs import Shape, profile, self_times
from tests.support.paths import ROOT


def build(tmp_path: Path, shape: Shape, seed: int = 0) -> Path:
    """A history made by ``history add``, one saved profile per commit."""
    db = tmp_path / "h.db"
    for i, times in enumerate(self_times(shape, seed)):
        saved = tmp_path / f"p{i}.json"
        profile(times).save(saved)
        when = "2026-01-01T00:00:00Z" if i == 0 else str(1_767_225_600 + 3600 * i)
        code = main(
            [
                "history",
                "add",
                str(saved),
                "--commit",
                f"c{i:03d}",
                "--db",
                str(db),
                "--branch",
                "main",
                "--when",
                when,
            ]
        )
        assert code == 0
    return db


@pytest.fixture(scope="module")
def stepped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 commits; block1 20 % slower from c030 on."""
    return build(
        tmp_path_factory.mktemp("stepped"), Shape(40, step_layer="block1", step_at=30, step=1.2)
    )


def test_check_fails_naming_the_layer_the_commit_and_the_size(
    stepped: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "check", "--db", str(stepped), "--fail-above", "5%"]) == 1
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("layerprof history check: FAIL: 1 regression")
    assert "layer block1 +" in first and "since commit c030" in first and "over 10 runs" in first
    size = float(first.split("layer block1 ")[1].split("%")[0])
    assert 15 < size < 25


def test_check_passes_below_the_threshold_and_for_old_changes(
    stepped: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "check", "--db", str(stepped), "--fail-above", "40"]) == 0
    out = capsys.readouterr().out
    assert "ok: no change beyond the noise and 40%" in out
    assert "within the gate: layer block1" in out
    assert main(["history", "check", "--db", str(stepped), "--recent", "5"]) == 0


def test_check_on_a_short_history_passes_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = build(tmp_path, Shape(runs=4))
    assert main(["history", "check", "--db", str(db)]) == 0
    assert "ok: too short to judge: 4 runs of this environment" in capsys.readouterr().out


def test_a_stable_history_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = build(tmp_path, Shape(runs=30, drift=1.4, outlier_run=12))
    assert main(["history", "check", "--db", str(db)]) == 0
    assert "ok: no change beyond the noise" in capsys.readouterr().out


def test_show_lists_the_change_and_the_trends(
    stepped: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "show", "--db", str(stepped)]) == 0
    out = capsys.readouterr().out
    assert "Change points" in out and "block1" in out and "c030" in out
    assert "Trends" in out and "latency" in out and "|" in out
    assert main(["history", "show", "--db", str(stepped), "--layer", "block1"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if " c030 " in line)
    assert "starts here" in row
    assert main(["history", "show", "--db", str(stepped), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "layerprof.history-view/1"
    assert [(c["series"], c["commit"], c["run_index"]) for c in data["changes"]] == [
        ("block1", "c030", 30)
    ]
    assert len(data["runs"]) == 40 and data["method"]["fdr"] == 0.01


def test_report_writes_a_self_contained_page_naming_the_commits(
    stepped: Path, tmp_path: Path
) -> None:
    out = tmp_path / "h.html"
    assert main(["history", "report", "--db", str(stepped), "--html", str(out)]) == 0
    page = out.read_text()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "<script src" not in page and "http://" not in page.split("<script")[0]
    data = json.loads(page.split('id="lp-data">')[1].split("</script>")[0])
    charts = [c for c in data.values() if c["kind"] == "lines"]
    assert charts and charts[0]["title"] == "latency"
    block = next(c for c in charts if c["title"] == "block1")
    assert any("since c030" in s["name"] for s in block["series"])
    assert "c030" in page.split('id="changes"')[1].split("</section>")[0]


def test_export_writes_every_run(stepped: Path, tmp_path: Path) -> None:
    out_csv, out_json = tmp_path / "h.csv", tmp_path / "h.json"
    assert (
        main(
            [
                "history",
                "export",
                "--db",
                str(stepped),
                "--csv",
                str(out_csv),
                "--json",
                str(out_json),
            ]
        )
        == 0
    )
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 40 * (1 + 7)
    assert {r["commit"] for r in rows} == {f"c{i:03d}" for i in range(40)}
    first = next(r for r in rows if r["name"] == "block1" and r["commit"] == "c000")
    assert float(first["median_ms"]) > 0 and first["when"] == "2026-01-01T00:00:00Z"
    data = json.loads(out_json.read_text())
    assert data["schema"] == "layerprof.history-export/1" and len(data["runs"]) == 40
    assert data["runs"][0]["latency_samples_ms"] is not None


def test_a_repeat_profile_is_one_run_per_process(tmp_path: Path) -> None:
    times = self_times(Shape(runs=1), 0)[0]
    runs = tuple(
        RunMedians(latency_ns=sum(times.values()) + k, self_ns=dict(times), round=None)
        for k in range(5)
    )
    saved = tmp_path / "r.json"
    prof = profile(times)
    prof = replace(prof, repeats=Repeats(runs))
    prof.save(saved)
    db = tmp_path / "h.db"
    assert main(["history", "add", str(saved), "--commit", "abc", "--db", str(db)]) == 0
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*), COUNT(DISTINCT process) FROM runs").fetchone() == (5, 5)
    conn.close()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["show"], "no history database there"),
        (["check", "--fdr", "2"], "--fdr 2: a rate strictly between 0 and 1"),
        (["show", "--env", "nope"], "--env nope: no such environment"),
        (["show", "--layer", "nope"], "no layer or figure 'nope'"),
        (["add", "{bad}", "--commit", "x"], "not JSON"),
        (
            ["add", "{prof}", "--commit", "x", "--when", "yesterday"],
            "--when 'yesterday': not a time",
        ),
        (["show", "--db", "{text}"], "not a layerprof history database"),
        (["export"], "history export needs --csv OUT or --json OUT"),
        (["add", "{prof}", "--commit", " "], "--commit: empty"),
        (["show", "--clock", "device"], "--clock device: no run of environment"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    db = tmp_path / "h.db"
    prof = tmp_path / "p.json"
    profile(self_times(Shape(runs=1), 0)[0]).save(prof)
    if argv != ["show"]:  # every case but the missing file has a history of one run
        assert main(["history", "add", str(prof), "--commit", "c0", "--db", str(db)]) == 0
        capsys.readouterr()
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "notes.txt").write_text("hello")
    filled = [
        a.format(bad=tmp_path / "bad.json", prof=prof, text=tmp_path / "notes.txt") for a in argv
    ]
    if "--db" not in filled:
        filled += ["--db", str(db) if argv != ["show"] else str(tmp_path / "none.db")]
    code = main(["history", *filled])
    err = capsys.readouterr().err
    assert code == 2, err
    assert words in err and err.startswith("layerprof: error: ")
    assert "Traceback" not in err


@pytest.mark.slow
def test_run_adds_real_processes_to_the_history(tmp_path: Path) -> None:
    """A real ``layerprof run --history`` of a small model, then ``--repeat 2`` (two
    child processes: two runs of one commit, recorded by the parent only)."""
    db = tmp_path / "h.db"
    base = [
        sys.executable,
        "-m",
        "layerprof",
        "run",
        "--arch",
        "tests.support.cli_models:Net",
        "--input",
        "2x4",
        "--iters",
        "5",
        "--warmup",
        "1",
        "-q",
        "--history",
        str(db),
    ]
    for extra, said in (
        (["--commit", "real0"], "added 1 run of real0"),
        (["--commit", "real1", "--repeat", "2"], "added 2 runs of real1"),
    ):
        done = subprocess.run(
            [*base, *extra], cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert said in done.stderr
    conn = sqlite3.connect(db)
    paths = {p for (p,) in conn.execute("SELECT path FROM paths")}
    assert {"", "fc1", "block2", "block2.1"} <= paths
    rows = conn.execute("SELECT commit_sha, process FROM runs ORDER BY id").fetchall()
    assert rows == [("real0", None), ("real1", 0), ("real1", 1)]
    assert conn.execute("SELECT COUNT(*) FROM figures WHERE name = 'latency'").fetchone()[0] == 3
    conn.close()
    check = subprocess.run(
        [sys.executable, "-m", "layerprof", "history", "check", "--db", str(db)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0 and "too short to judge: 3 runs" in check.stdout


def test_history_never_imports_torch(stepped: Path, tmp_path: Path) -> None:
    """add, show, check, report and export read and write files only: no torch."""
    saved = tmp_path / "p.json"
    profile(self_times(Shape(runs=1), 0)[0]).save(saved)
    db, page = str(tmp_path / "h.db"), str(tmp_path / "h.html")
    code = (
        "import sys\nfrom layerprof.cli import main\n"
        f"main(['history', 'add', {str(saved)!r}, '--commit', 'x', '--db', {db!r}])\n"
        f"for action in (['show'], ['check'], ['report', '--html', {page!r}]):\n"
        f"    main(['history', *action, '--db', {str(stepped)!r}])\n"
        "print('TORCH', 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("TORCH False")


def test_a_saved_trace_analysis_of_one_rank_is_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """analyze --json of a real one-rank trace (tests/data/hta, MIT) goes in as one run."""
    from tests.support.paths import DATA

    saved, db = tmp_path / "a.json", tmp_path / "h.db"
    assert main(["analyze", str(DATA / "hta" / "cpu_only"), "-q", "--json", str(saved)]) == 0
    assert main(["history", "add", str(saved), "--commit", "t1", "--db", str(db)]) == 0
    assert "added 1 run of commit t1" in capsys.readouterr().err
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    conn.close()


def test_show_says_which_environments_the_history_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs of two torch versions: judged apart, the newest by default, the other by --env."""
    db = tmp_path / "h.db"
    times = self_times(Shape(runs=2), 0)
    for i, torch in enumerate(("2.x", "2.y")):
        saved = tmp_path / f"p{i}.json"
        prof = profile(times[i])
        prof = replace(prof, meta=replace(prof.meta, torch=torch))
        prof.save(saved)
        assert main(["history", "add", str(saved), "--commit", f"c{i}", "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["history", "show", "--db", str(db)]) == 0
    out = capsys.readouterr()
    assert "2 environments in" in out.err and "torch 2.y" in out.out
    other = out.err.split("; ")[1].split(" ")[0]
    assert main(["history", "show", "--db", str(db), "--env", other]) == 0
    assert "torch 2.x" in capsys.readouterr().out


def test_run_checks_its_history_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A foreign --history file or a missing --commit fails before the model loads (the
    model named here does not exist: reaching it would be another error)."""
    foreign = tmp_path / "notes.db"
    foreign.write_text("hello")
    base = ["run", "--arch", "no_such_module:Net", "--input", "2x4"]
    assert main([*base, "--history", str(foreign), "--commit", "abc"]) == 2
    assert "not a layerprof history database" in capsys.readouterr().err
    assert main([*base, "--history", str(tmp_path / "h.db")]) == 2
    assert "--history needs --commit SHA" in capsys.readouterr().err
    assert main([*base, "--commit", "abc"]) == 2
    assert "--commit names the commit of a run added with --history" in capsys.readouterr().err
    assert foreign.read_text() == "hello"
