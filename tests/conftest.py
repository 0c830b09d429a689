from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# CI must not fail on a random example nobody can reproduce: fixed examples there,
# fresh ones on developers' machines.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
HTA = SHARED / "traces" / "hta"


@pytest.fixture
def hta_dir() -> Path:
    """The real Kineto traces in ../shared/traces/hta; skips when absent."""
    if not HTA.is_dir():
        pytest.skip(f"{HTA} not present")
    return HTA
