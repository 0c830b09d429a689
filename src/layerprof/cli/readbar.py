"""What ``analyze`` says about a big read: a bar of the bytes read (on a terminal
only) and, with ``--verbose``, the run's peak memory."""

from __future__ import annotations

import resource
import sys
from time import monotonic
from typing import Any

from layerprof.reading import format_size

#: The bar appears only once a read has taken this long: a small trace shows none.
SHOW_AFTER_S = 1.0


class BytesRead:
    """A rich bar of a file's bytes read so far, on stderr; nothing unless ``enabled``."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self._start = monotonic()
        self._bar: Any = None
        self._task: Any = None

    def update(self, done: int, size: int | None) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            if monotonic() - self._start < SHOW_AFTER_S:
                return
            # rich is imported only when a bar is shown (start-up time of a small run)
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("reading"),
                BarColumn(),
                DownloadColumn(binary_units=True),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("reading", total=size)
        self._bar.update(self._task, completed=done, total=size)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def peak_memory() -> str:
    """This process's peak resident memory, as one line (``getrusage``: Linux counts
    KiB, macOS bytes). A pool's workers are not counted: RUSAGE_CHILDREN sees only
    the children waited for (a process pool's read 3.1 MiB where a worker held
    hundreds), so no figure is printed for them rather than a wrong one."""
    scale = 1 if sys.platform == "darwin" else 1024
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    return (
        f"layerprof: peak memory {format_size(own)} (resident, this process;"
        " worker processes, when ranks ran in a pool, are not counted)"
    )
