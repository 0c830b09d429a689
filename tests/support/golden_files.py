"""Golden files of rendered output: compared byte for byte; LAYERPROF_UPDATE_GOLDEN=1 rewrites them."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("LAYERPROF_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()
