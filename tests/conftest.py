"""What every test module shares: the run's temporary directory, hypothesis profiles,
the real traces checked in under tests/data, the inductor settings for compiling tests,
and the ``slow`` marker's default deselection (see pyproject.toml)."""

from __future__ import annotations

import logging
import multiprocessing.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Everything a test run writes outside tmp_path (torch's inductor cache, Dask's scratch
# space, the peak cache, pytest's own base temp) lands in one directory that is removed
# when the run ends: a run leaves nothing in the system's temp folder. TMPDIR reaches
# the subprocesses the CLI tests start.
# multiprocessing keeps a folder of its own that it removes at exit, after this run's
# clean-up: it is made first, in the system's temp folder, so that it is still there then.
multiprocessing.util.get_temp_dir()
_RUN_TMP = tempfile.mkdtemp(prefix="layerprof-tests-")
os.environ["TMPDIR"] = _RUN_TMP
tempfile.tempdir = _RUN_TMP

# CI must not fail on a random example nobody can reproduce: fixed examples there,
# fresh ones on developers' machines. No per-example deadline anywhere: on a shared
# machine a stall of 200 ms fails a cheap example that has nothing slow in it.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", derandomize=True, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Runs measure the CPU's peak once and cache it per machine: in tests, in a folder of
# their own (shared by the whole session, and by the CLI subprocesses), not the user's.
os.environ.setdefault("LAYERPROF_CACHE_DIR", os.path.join(_RUN_TMP, "cache"))

ROOT = Path(__file__).resolve().parents[1]
HTA = ROOT / "tests" / "data" / "hta"


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_RUN_TMP, ignore_errors=True)


@pytest.fixture
def hta_dir() -> Path:
    """Real Kineto traces from HTA's test data (MIT, LICENSE beside them)."""
    assert HTA.is_dir(), f"{HTA} is part of the repository"
    return HTA


@pytest.fixture(scope="session")
def inductor_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Inductor's caches (FX graphs, C++ kernels) in a directory of this run's own, and
    one compile thread (no worker pool), set through torch's own config patch so the
    settings come back whole whichever module ran first."""
    import torch._inductor.config as inductor_config

    path = tmp_path_factory.mktemp("inductor")
    # torch's structured trace logs whole graphs at DEBUG; pytest's log capture would
    # make every compile serialize them
    trace_log = logging.getLogger("torch.__trace")
    propagate = trace_log.propagate
    trace_log.propagate = False
    try:
        with pytest.MonkeyPatch.context() as env, inductor_config.patch(compile_threads=1):
            env.setenv("TORCHINDUCTOR_CACHE_DIR", str(path))
            yield path
    finally:
        trace_log.propagate = propagate
