"""Many ranks: every executor gives the same Run; failures are named, never dropped.

The traces are copies of one real torch.profiler CPU trace with rewritten rank
ids and jittered timestamps (``tests/rank_traces.py``).
"""

from __future__ import annotations

import contextlib
import gzip
import pickle
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from layerprof import codec
from layerprof.cli import main
from layerprof.errors import TraceError, UsageError
from layerprof.trace import analyze
from layerprof.trace.jobs.executors import (
    DaskExecutor,
    SerialExecutor,
    default_executor,
    parse_executor,
)
from layerprof.trace.jobs.processpool import ProcessExecutor
from layerprof.trace.jobs.rankjobs import RankJob
from layerprof.trace.jobs.remote import TraceInput, list_inputs
from layerprof.trace.jobs.tasks import Failed
from tests.support.rank_traces import KillAlways, KillOnce, cpu_trace, simulate_ranks

RANKS = 8
DASK_SECONDS = 300  # a LocalCluster of two workers starts in seconds; never wait forever


@contextlib.contextmanager
def bounded(seconds: float) -> Iterator[None]:
    """Fail (TimeoutError in this thread) instead of hanging past ``seconds``."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def one_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cpu_trace(tmp_path_factory.mktemp("one") / "trace.json")


@pytest.fixture(scope="module")
def rank_dir(one_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ranks")
    simulate_ranks(one_trace, folder, RANKS)
    return folder


@pytest.fixture(scope="module")
def serial_doc(rank_dir: Path) -> dict[str, Any]:
    return codec.to_dict(analyze(rank_dir, executor="serial"), samples=True)


def test_serial_run_has_every_rank_and_the_layer_table(rank_dir: Path, serial_doc: Any) -> None:
    run = analyze(rank_dir, executor="serial")
    assert [p.rank for p in run.ranks] == list(range(RANKS))
    assert run.rank_source == "distributedInfo.rank"
    assert run.cross is not None and run.cross.slowest_rank == RANKS - 1  # stretched most
    rows = {r.path: r for r in run.layer_ranks}
    assert rows  # nn.Module-free trace: the annotation tree (train_step) is compared
    for row in rows.values():
        assert [rank for rank, _ in row.ns_by_rank] == list(range(RANKS))
        assert row.min_ns <= row.median_ns <= row.max_ns
        assert dict(row.ns_by_rank)[row.slowest_rank] == row.max_ns


def test_processes_give_the_same_run_as_serial(rank_dir: Path, serial_doc: Any) -> None:
    run = analyze(rank_dir, executor=ProcessExecutor(workers=2))
    assert codec.to_dict(run, samples=True) == serial_doc


@pytest.mark.slow
def test_dask_local_cluster_gives_the_same_run(rank_dir: Path, serial_doc: Any) -> None:
    with bounded(DASK_SECONDS):
        run = analyze(rank_dir, executor=DaskExecutor(workers=2))
    assert codec.to_dict(run, samples=True) == serial_doc


def test_worker_killed_mid_run_is_retried(rank_dir: Path, serial_doc: Any, tmp_path: Path) -> None:
    marker = str(tmp_path / "killed")
    run = analyze(rank_dir, executor=_Killing(KillOnce, "rank-3.", marker))
    assert Path(marker).exists()  # a worker did die
    assert codec.to_dict(run, samples=True) == serial_doc


def test_worker_that_always_dies_names_its_rank(rank_dir: Path) -> None:
    with pytest.raises(TraceError) as exc:
        analyze(rank_dir, executor=_Killing(KillAlways, "rank-5."))
    message = str(exc.value)
    assert "1 of 8 traces failed" in message
    assert "trace.rank-5.json.gz: its worker process died" in message
    assert "\n" not in message


def test_partial_merges_the_others_and_names_the_dead_rank(rank_dir: Path) -> None:
    run = analyze(rank_dir, executor=_Killing(KillAlways, "rank-5."), partial=True)
    assert [p.rank for p in run.ranks] == [0, 1, 2, 3, 4, 6, 7]
    merged = {"merged": 7, "traces": 8, "failed": 1}
    assert any(n.kind == "partial-merge" and n.data == merged for n in run.notes)
    assert len(run.failed) == 1
    assert "trace.rank-5.json.gz: its worker process died" in run.failed[0]
    doc = codec.to_dict(run)
    assert doc["failed"] == list(run.failed) and doc["skipped"] == []
    assert codec.from_dict(doc).failed == run.failed


@pytest.mark.slow
def test_dask_worker_that_always_dies_names_its_rank(rank_dir: Path) -> None:
    import dask
    import distributed  # noqa: F401  (its config defaults first: set() drops new keys on exit)

    class Killing(DaskExecutor):
        def run(self, fn: Any, items: Any, labels: Any) -> Any:
            return super().run(KillAlways(fn, "rank-2."), items, labels)

    with (
        bounded(DASK_SECONDS),
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        pytest.raises(TraceError) as exc,
    ):
        analyze(rank_dir, executor=Killing(workers=2))
    assert "trace.rank-2.json.gz: the Dask workers running it died" in str(exc.value)


@pytest.mark.slow
def test_dask_worker_killed_mid_run_is_retried(
    rank_dir: Path, serial_doc: Any, tmp_path: Path
) -> None:
    """The scheduler re-runs the task of a worker that died (its nanny starts a new one)."""
    marker = str(tmp_path / "killed")

    class Killing(DaskExecutor):
        def run(self, fn: Any, items: Any, labels: Any) -> Any:
            return super().run(KillOnce(fn, "rank-6.", marker), items, labels)

    with bounded(DASK_SECONDS):
        run = analyze(rank_dir, executor=Killing(workers=2))
    assert Path(marker).exists()  # a worker did die
    assert codec.to_dict(run, samples=True) == serial_doc


class _Killing(ProcessExecutor):
    """A 2-worker pool whose per-rank function kills its worker on one rank."""

    def __init__(self, kind: Any, victim: str, *marker: str) -> None:
        super().__init__(workers=2)
        self.wrap = lambda fn: kind(fn, victim, *marker)

    def run(self, fn: Any, items: Any, labels: Any) -> Iterator[Any]:
        return super().run(self.wrap(fn), items, labels)


def test_a_damaged_rank_is_named_after_the_others_finish(
    rank_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    for f in sorted(rank_dir.iterdir())[:4]:
        (folder / f.name).write_bytes(f.read_bytes())
    bad = folder / "trace.rank-9.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:-8])
    seen: list[tuple[int, int]] = []
    with pytest.raises(TraceError) as exc:
        analyze(folder, executor="serial", progress=lambda d, t: seen.append((d, t)))
    assert str(exc.value).startswith("1 of 5 traces failed: ")
    assert f"{bad}: truncated gzip" in str(exc.value)
    assert exc.value.hint is not None and "--partial" in exc.value.hint
    assert seen == [(i, 5) for i in range(1, 6)]  # the others still ran
    run = analyze(folder, executor="serial", partial=True)
    assert len(run.ranks) == 4
    # the CLI merges the four, lists the damaged one, and exits 0
    capsys.readouterr()
    out_json = tmp_path / "job.json"
    assert main(["analyze", str(folder), "--partial", "--json", str(out_json)]) == 0
    assert f"failed: {bad}: truncated gzip" in capsys.readouterr().out
    assert [f for f in orjson.loads(out_json.read_bytes())["failed"] if str(bad) in f]


def test_profiles_cross_compactly_without_events(one_trace: Path) -> None:
    result = RankJob()(TraceInput(str(one_trace), str(one_trace)))
    assert result.profile is not None and result.profile.events is None
    size = len(pickle.dumps(result))
    assert size < one_trace.stat().st_size / 2  # typed results, not the events


def test_executor_specs() -> None:
    assert isinstance(parse_executor("serial"), SerialExecutor)
    pool = parse_executor("processes=3")
    assert isinstance(pool, ProcessExecutor) and pool.workers == 3
    dask_ = parse_executor("dask=tcp://127.0.0.1:8786")
    assert isinstance(dask_, DaskExecutor) and dask_.address == "tcp://127.0.0.1:8786"
    assert isinstance(default_executor(1), SerialExecutor)
    for bad in ("threads", "processes=0", "serial=2", "processes=x"):
        with pytest.raises(UsageError):
            parse_executor(bad)


def test_serial_executor_reports_exceptions_and_goes_on() -> None:
    def half(x: int) -> int:
        if x == 2:
            raise ValueError("two is bad")
        return x // 2

    out = dict(SerialExecutor().run(half, [0, 2, 4], ["a", "b", "c"]))
    assert out[0] == 0 and out[2] == 2
    assert out[1] == Failed("ValueError: two is bad")


def test_dask_missing_is_one_line(
    rank_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    assert main(["analyze", str(rank_dir), "--executor", "dask", "-q"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert (
        err[0] == "layerprof: error: --executor dask needs dask.distributed, which is not installed"
    )
    assert err[1] == "  hint: pip install 'layerprof[dask]'"


def test_cli_bad_executor_is_one_line(rank_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(rank_dir), "--executor", "threads"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("layerprof: error: --executor 'threads': expected serial")


def test_cli_glob_and_json(rank_dir: Path, tmp_path: Path, serial_doc: Any) -> None:
    out = tmp_path / "run.json"
    pattern = str(rank_dir / "trace.rank-*.json.gz")
    assert main(["analyze", pattern, "--executor", "processes=2", "-q", "--json", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    assert [r["rank"] for r in doc["ranks"]] == list(range(RANKS))
    assert doc["layers_across_ranks"][0]["slowest_rank"] in range(RANKS)
    same = codec.to_dict(analyze(rank_dir, executor="serial"))
    assert {**doc, "path": ""} == {**same, "path": ""}


def test_analyze_with_processes_never_imports_torch(rank_dir: Path) -> None:
    code = (
        "import sys; from layerprof.cli import main;"
        f" rc = main(['analyze', {str(rank_dir)!r}, '--executor', 'processes=2', '-q']);"
        " assert rc == 0, rc; assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_many_ranks_console_prints_one_report(rank_dir: Path) -> None:
    run = analyze(rank_dir, executor="serial")
    text = run.render("console", width=120)
    assert isinstance(text, str)
    assert text.count("─ rank ") == 1  # one rank's whole report, not eight
    assert f"{RANKS} ranks: rank {RANKS - 1}'s report (slowest median step)" in text
    assert f"layers across {RANKS} ranks" in text


def test_glob_matching_nothing(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"no \.json or \.json\.gz file matches"):
        list_inputs(str(tmp_path / "*.json"))


EAGAIN = BlockingIOError(11, "Resource temporarily unavailable")
EAGAIN_NOTE = "BlockingIOError: [Errno 11] Resource temporarily unavailable"


@pytest.mark.parametrize(
    ("where", "error", "why"),
    [
        ("concurrent.futures.ProcessPoolExecutor.submit", EAGAIN, EAGAIN_NOTE),  # workers
        ("concurrent.futures.ProcessPoolExecutor.__init__", EAGAIN, EAGAIN_NOTE),  # its locks
        # the forkserver's own fork failed: it hangs up on the pool (seen under load)
        (
            "multiprocessing.forkserver.connect_to_new_process",
            EOFError("unexpected EOF"),
            "the forkserver could not fork",
        ),
    ],
)
def test_no_worker_process_can_start(
    rank_dir: Path,
    serial_doc: Any,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    error: Exception,
    why: str,
) -> None:
    """A process limit (fork failing with EAGAIN): the ranks run here, and a note says so."""

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(where, refuse)
    executor = ProcessExecutor(workers=2)
    note = f"worker processes could not start ({why}): the ranks ran here"
    for _ in range(2):  # a reused executor says it once per run
        run = analyze(rank_dir, executor=executor)
        assert {**codec.to_dict(run, samples=True), "notes": []} == serial_doc
        assert [(n.kind, n.text) for n in run.notes] == [("no-worker-processes", note)]


@pytest.mark.parametrize("executor", ["processes=2", None])
@pytest.mark.parametrize("guarded", [True, False])
def test_a_script_runs_once_with_or_without_the_main_guard(
    one_trace: Path, tmp_path: Path, guarded: bool, executor: str | None
) -> None:
    """Worker processes never import the caller's script: without the guard it is not
    run again (it used to profile the user's model once per worker and overwrite
    their output files), and with it the README's example works as before."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    simulate_ranks(one_trace, folder, 2)
    log = tmp_path / "runs.log"
    call = (
        f"open({str(log)!r}, 'a').write('ran\\n')\n"
        f"run = layerprof.analyze({str(folder)!r}, executor={executor!r})\n"
        "print(len(run.ranks))\n"
    )
    body = (
        "if __name__ == '__main__':\n" + "".join("    " + line + "\n" for line in call.splitlines())
        if guarded
        else call
    )
    script = tmp_path / "script.py"
    script.write_text("import layerprof\n" + body)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"
    assert log.read_text() == "ran\n"  # the script's own side effect, once


def test_unreachable_dask_scheduler_is_one_line(
    rank_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import dask
    import distributed  # noqa: F401  (its config defaults, before setting one of them)

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        code = main(["analyze", str(rank_dir), "-q", "--executor", "dask=tcp://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in err
    assert "internal error" not in err


def test_a_refused_dask_port_fails_at_once_and_says_refused(
    rank_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Dask's connect retries a refused port for its whole timeout, then calls it a timeout."""
    import time

    import dask
    import distributed  # noqa: F401

    with dask.config.set({"distributed.comm.timeouts.connect": "20s"}):
        t0 = time.monotonic()
        code = main(["analyze", str(rank_dir), "-q", "--executor", "dask=tcp://127.0.0.1:1"])
        waited = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 2, err
    assert "refused" in err and "timed out" not in err.lower(), err
    assert waited < 15, waited
