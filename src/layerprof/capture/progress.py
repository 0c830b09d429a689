"""A progress bar on stderr that appears only once a run has taken a second."""

from __future__ import annotations

import time
from typing import Any

SHOW_AFTER_S = 1.0


class Progress:
    def __init__(self, *, enabled: bool, total: int, description: str = "profiling") -> None:
        self.enabled = enabled
        self.total = total
        self.description = description
        self.done = 0
        self._start = time.monotonic()
        self._bar: Any = None
        self._task: Any = None

    def advance(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        if self._bar is None and time.monotonic() - self._start >= SHOW_AFTER_S:
            from rich.console import Console
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=self.total)
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)

    def update(self, done: int, total: int) -> None:
        """``done`` of ``total`` (a callback for work whose size is known late)."""
        self.total = total
        self.advance(done - self.done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
