"""The default executor: a process pool only when the work pays for starting one."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerprof.trace.jobs import executors, rankjobs
from layerprof.trace.jobs.executors import SerialExecutor, default_executor
from layerprof.trace.jobs.processpool import ProcessExecutor
from layerprof.trace.jobs.remote import TraceInput
from tests.support.rank_traces import cpu_trace, simulate_ranks


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executors, "cores", lambda: 2)


@pytest.mark.usefixtures("two_cores")
def test_small_jobs_run_here_and_big_ones_in_a_pool() -> None:
    start = executors.POOL_START_SECONDS
    assert isinstance(default_executor(2, [0.1, 0.1]), SerialExecutor)
    # a pool of two saves half of 2 x 2 s, more than it costs to start
    assert isinstance(default_executor(2, [2 * start, 2 * start]), ProcessExecutor)
    # one long rank and one short: the pool still waits for the long one
    assert isinstance(default_executor(2, [4 * start, 0.1]), SerialExecutor)
    assert isinstance(default_executor(2, None), ProcessExecutor)  # unknown: remote files
    assert isinstance(default_executor(1, [100.0]), SerialExecutor)


def test_one_core_never_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executors, "cores", lambda: 1)
    assert isinstance(default_executor(8, [100.0] * 8), SerialExecutor)


@pytest.mark.usefixtures("two_cores")
def test_two_small_rank_traces_are_analyzed_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's two-rank example: no worker process is started for kilobytes."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    simulate_ranks(cpu_trace(tmp_path / "one.json"), folder, 2)

    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("a process pool was started for two small traces")

    monkeypatch.setattr(ProcessExecutor, "run", no_pool)
    run = rankjobs.analyze(folder)
    assert [p.rank for p in run.ranks] == [0, 1]


def test_estimates_grow_with_size_and_gzip(tmp_path: Path) -> None:
    plain, packed = tmp_path / "a.json", tmp_path / "b.json.gz"
    plain.write_bytes(b" " * 1000)
    packed.write_bytes(b" " * 1000)
    got = rankjobs._estimated_seconds([TraceInput(str(plain), "a"), TraceInput(str(packed), "b")])
    assert got is not None and got[1] > got[0] > 0
    remote = [TraceInput("s3://b/a.json", "s3://b/a.json"), TraceInput(str(plain), "a")]
    assert rankjobs._estimated_seconds(remote) is None
