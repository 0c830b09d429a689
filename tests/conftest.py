from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
HTA = SHARED / "traces" / "hta"


@pytest.fixture
def hta_dir() -> Path:
    """The real Kineto traces in ../shared/traces/hta; skips when absent."""
    if not HTA.is_dir():
        pytest.skip(f"{HTA} not present")
    return HTA
