"""Where the repository's folders are, for tests at any depth of ``tests/``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
DATA = TESTS / "data"
GOLDEN = TESTS / "golden"
SUPPORT = TESTS / "support"
