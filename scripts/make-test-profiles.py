"""Measure the profiles the renderer tests read, and save them under tests/data/profiles.

Renderer, escaping and console-fit tests check what the report shows of a real
measured profile, not the measurement itself, so they read these saved files
(every iteration kept) instead of profiling models in every test run. Run this
from the repository root after a change to what a profile holds, then review
and commit the files:

    python scripts/make-test-profiles.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "profiles"


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from tests.support import html_subjects as html
    from tests.support.deep_models import bert_like, resnet50_like

    OUT.mkdir(parents=True, exist_ok=True)
    saved = {
        "hooks": html.measure_hooks(),
        "ops": html.measure_ops(),
        "hostile": html.measure_hostile(),
        "sleep-1ms": html.measure_sleepy(1_000),
        "sleep-4ms": html.measure_sleepy(4_000),
        "bert": html.measure_deep(*bert_like()),
        "resnet50": html.measure_deep(*resnet50_like()),
    }
    for name, profile in saved.items():
        path = profile.save(OUT / f"{name}.json", samples=True)
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
