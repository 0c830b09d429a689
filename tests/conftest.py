from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# CI must not fail on a random example nobody can reproduce: fixed examples there,
# fresh ones on developers' machines. No per-example deadline anywhere: on a shared
# machine a stall of 200 ms fails a cheap example that has nothing slow in it.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", derandomize=True, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Runs measure the CPU's peak once and cache it per machine: in tests, in a folder of
# their own (shared by the whole session, and by the CLI subprocesses), not the user's.
os.environ.setdefault("LAYERPROF_CACHE_DIR", tempfile.mkdtemp(prefix="layerprof-cache-"))

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
HTA = SHARED / "traces" / "hta"


@pytest.fixture
def hta_dir() -> Path:
    """The real Kineto traces in ../shared/traces/hta; skips when absent."""
    if not HTA.is_dir():
        pytest.skip(f"{HTA} not present")
    return HTA
