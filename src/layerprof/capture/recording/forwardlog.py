"""The Recorder's record of forward calls, as its timing wrappers write it.

Each wrapper appends ``(layer index, time)`` when a call enters and ``(EXIT,
time)`` when it leaves to one flat list (``pairs``: two ints a call end, no
object per call); with a device clock it also keeps the call's CUDA-event marks
(``pending``) until the outermost call ends, when they are resolved at once
(``dev``: one synchronize per forward, not per layer). ``compact()`` folds the
whole outermost calls into ``CallTable`` arrays (``layertimes.parse_events``),
or hands each table to a sink (``Recorder.stream``: summed as they are made).

The wrappers bind ``pairs.append`` once, so the list is never replaced: it is
emptied in place.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from layerprof.capture.platform.clocks import Clock
from layerprof.capture.recording.layertimes import (
    EXIT,
    RAISED,
    SKIP,
    CallTable,
    complete_prefix,
    is_entry,
    parse_events,
)


class ForwardLog:
    """Calls since the last compaction (``pairs``) and the tables folded from earlier
    ones; ``paths`` names the layer indices (the Recorder's list, grown as it wraps)."""

    def __init__(self, paths: Sequence[str], device_clock: Clock | None) -> None:
        self.paths = paths
        self.device_clock = device_clock
        self.pairs: list[int] = []  # (code, time) pairs since the last compaction
        self.zero = 0  # an index of pairs where no call is open
        self.pending: list[Any] = []  # device marks of the open outermost call
        self.dev: list[int] = []  # resolved device times, one per pair
        self.open = [0]  # open calls (device clock only: when to resolve)
        # 1 while the Recorder's bookkeeping around a forward of the model runs (the
        # root wrapper reads it: the root called inside its own forward is a plain call)
        self.running = [0]
        self.tables: list[CallTable] = []
        self.failed: str | None = None  # where the last failed forward raised

    @property
    def calls_held(self) -> int:
        """Calls held in the pairs and the tables."""
        return len(self.pairs) // 2 + sum(len(t) for t in self.tables)

    def inside_forward(self) -> bool:
        """Whether a forward of the model may still have a call open (compact keeps it)."""
        return self.running[0] > 0 or bool(self.pending)

    def skip(self, t0: int, t1: int) -> None:
        """Log [t0, t1] as recorder time inside the open layer (a SKIP pseudo-call)."""
        self.pairs += (SKIP, t0, EXIT, t1)
        if self.device_clock is not None:
            dm = self.device_clock.mark()
            self.pending += (dm, dm)

    def flush_device(self) -> None:
        """Resolve the device marks of the outermost call that just ended (one sync)."""
        assert self.device_clock is not None
        self.dev.extend(self.device_clock.resolve(self.pending))
        self.pending.clear()

    def raised(self, t: int) -> None:
        """A recorded call raised at ``t``: close it; if it was the outermost one, drop
        its iteration and remember the innermost layer the error came from."""
        pairs = self.pairs
        pairs += (RAISED, t)
        if self.device_clock is not None:
            self.pending.append(self.device_clock.mark())
            self.open[0] -= 1
        codes = np.array(pairs[self.zero :: 2], dtype=np.int64)
        depth = np.cumsum(np.where(is_entry(codes), 1, -1))
        if depth[-1] > 0:
            return  # an inner call: its caller may catch the error
        if _checkpoint_stop(sys.exc_info()[1]):
            return  # a recompute that checkpointing ended on purpose: kept, as a call
        self.failed = self._origin(codes, depth)
        zeros = np.flatnonzero(depth[:-1] == 0)
        start = self.zero + 2 * (int(zeros[-1]) + 1 if len(zeros) else 0)
        del pairs[start:]
        if self.device_clock is not None:
            self.device_clock.resolve(self.pending)  # frees the events for reuse
            self.pending.clear()

    def _origin(self, codes: Any, depth: Any) -> str | None:
        """The innermost layer of the error that just left the outermost call: the call
        closed by the first of the trailing run of RAISED exits."""
        first = len(codes) - 1
        while first > 0 and codes[first - 1] == RAISED:
            first -= 1
        level = depth[first] + 1
        opened = np.flatnonzero(is_entry(codes[:first]) & (depth[:first] == level))
        if len(opened) == 0:
            return None
        code = int(codes[opened[-1]])
        return self.paths[code] if code >= 0 else None

    def open_path(self) -> str | None:
        """The innermost layer open now (a forward running), or None."""
        codes = np.array(self.pairs[self.zero :: 2], dtype=np.int64)
        if len(codes) == 0:
            return None
        depth = np.cumsum(np.where(is_entry(codes), 1, -1))
        if depth[-1] <= 0:
            return None
        opened = np.flatnonzero(is_entry(codes) & (depth == depth[-1]))
        code = int(codes[opened[-1]])
        return self.paths[code] if code >= 0 else None

    def compact(
        self, inside_forward: bool, sink: Callable[[CallTable], None] | None = None
    ) -> None:
        """Move the whole outermost calls into a CallTable (or hand it to ``sink``);
        ``inside_forward``: a call may still be open, so a remainder is kept."""
        pairs = self.pairs
        if not pairs:
            return
        codes = np.array(pairs[0::2], dtype=np.int64)
        n = complete_prefix(codes, len(self.paths))
        if n:
            times = np.array(pairs[1 : 2 * n : 2], dtype=np.int64)
            dev = None
            if self.device_clock is not None:
                dev = np.array(self.dev[:n], dtype=np.int64)
                del self.dev[:n]
            table = parse_events(codes[:n], times, dev)
            if sink is not None:
                sink(table)
            else:
                self.tables.append(table)
        if n < len(codes) and not inside_forward:
            del pairs[:]  # a misaligned remainder (see complete_prefix): drop it
            del self.dev[:]
        else:
            del pairs[: 2 * n]
        self.zero = 0

    def table(self) -> CallTable:
        """The folded tables as one (compact first)."""
        if len(self.tables) > 1:
            self.tables = [CallTable.concat(self.tables)]
        return self.tables[0] if self.tables else CallTable.empty()

    def clear(self) -> None:
        """Forget every call (the pairs, their device times and the tables)."""
        self.pairs.clear()
        self.dev.clear()
        self.tables.clear()
        self.zero = 0


def _checkpoint_stop(exc: BaseException | None) -> bool:
    """``torch.utils.checkpoint``'s non-reentrant recompute stops the recomputed forward
    by raising once it has every tensor the backward needs ("early stop"): control flow,
    not a failure of the module."""
    return exc is not None and type(exc).__name__ == "_StopRecomputationError"
