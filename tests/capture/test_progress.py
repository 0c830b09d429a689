from __future__ import annotations

import pytest

from layerprof.capture import progress as progress_mod
from layerprof.capture.progress import Progress


def test_bar_appears_only_after_the_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    # a delay no stall of a loaded machine reaches: before it, no bar at all
    monkeypatch.setattr(progress_mod, "SHOW_AFTER_S", 3600.0)
    slow = Progress(enabled=True, total=3)
    slow.advance(1)
    assert slow._bar is None
    slow.close()

    monkeypatch.setattr(progress_mod, "SHOW_AFTER_S", 0.0)
    bar = Progress(enabled=True, total=3)
    bar.advance(1)
    assert bar._bar is not None
    bar.advance(2)
    bar.close()
    assert bar._bar is None and bar.done == 3


def test_disabled_never_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_mod, "SHOW_AFTER_S", 0.0)
    off = Progress(enabled=False, total=2)
    off.advance(2)
    assert off._bar is None
