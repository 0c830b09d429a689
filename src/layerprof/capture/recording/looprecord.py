"""A training loop's active steps, reduced to per-layer sums as they end.

A Recorder with ``backward=True`` hands its ended active steps here in chunks
(every few hundred steps, and at ``profile()``): their forward calls (the log's
tables) and backward calls (``StepMarks.backward``) become columns of
per-layer matrices, 4 bytes per layer, forward or backward, and quantity
(total, self; device total and self with a device clock) while a layer's part
of a step stays under 2.1 s (int32; 8 bytes after one that does not); each step's marks
become its ``LoopStep`` row. Nothing of a chunk's calls is kept after it, so a
run of 100k steps holds its sums and its rows, not its calls
(``benchmarks/loop_memory.py``).

A chunk's outermost calls are, in order: the model's forwards (outermost calls
of the root, numbered like the Recorder's forward count), activation
checkpointing's recomputes (an outermost call of another module inside a
step's backward) and calls made outside any step (dropped).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from layerprof.capture.recording.layertimes import CallTable, Correction, SampleSums
from layerprof.capture.recording.loop import StepMarks, StepSchedule, step_row
from layerprof.errors import UsageError
from layerprof.pivot.records import LayerSamples
from layerprof.pivot.sections.loop import LayerSteps, LoopStep, Recompute, TrainingLoop
from layerprof.stats import IntValues, Series


@dataclass(frozen=True)
class Chunk:
    """Ended active steps and the calls recorded since the previous chunk.

    ``tables`` hold whole outermost calls in order; the first root call among
    them is the model's forward number ``first_forward``; each step's
    ``iterations`` are its forwards' numbers, and ``next_forward`` is the
    number of the first forward after the last step (a step not ended yet).
    ``backward_paths`` names the layer indices of the steps' backward tables.
    """

    tables: Sequence[CallTable]
    steps: Sequence[StepMarks]
    first_forward: int
    next_forward: int
    backward_paths: Sequence[str]


class LoopRecord:
    """Per-layer sums of the active steps' forwards and backwards, their step rows and
    what checkpointing recomputed; ``correction`` is applied to forward host times as
    they are summed (decided before the first chunk)."""

    def __init__(
        self, n_paths: int, device: bool, correction: Correction | None, room: int | None = None
    ) -> None:
        self.correction = correction
        # room for the schedule's active steps (one forward and backward each) when it has
        # a count: no growth, whose copy holds old and new columns at once; a window of
        # more than 16k steps starts there and grows (a loop may end long before it)
        self.room = min(room or 256, 1 << 14)
        self.forward = SampleSums(n_paths, self.room, device, narrow=True)
        self.backward: SampleSums | None = None
        self.rows: list[LoopStep] = []
        self.forwards: list[int] = []  # per step: how many forward columns it has
        self.backwards: list[int] = []  # per step: how many backward columns it has
        self._origin: int | None = None
        self._recompute: dict[int, dict[int, int]] = {}  # layer -> step -> ns
        self._recompute_calls: dict[int, int] = {}

    @property
    def steps(self) -> int:
        return len(self.rows)

    def add(self, chunk: Chunk, root: int | None) -> CallTable | None:
        """Reduce one chunk; returns its calls from the first forward after its last step
        on (a step not ended yet: they go into the next chunk), or None."""
        table = CallTable.concat(list(chunk.tables)) if chunk.tables else CallTable.empty()
        real = table.layer >= 0
        outer = np.flatnonzero(table.level == 1)
        firsts = table.layer[outer]
        of_model = np.flatnonzero(firsts == root) if root is not None else outer[:0]
        kept: list[int] = []
        for st in chunk.steps:
            before = len(kept)
            for f in st.iterations:
                k = f - chunk.first_forward
                if 0 <= k < len(of_model):
                    kept.append(int(of_model[k]))
            self.forwards.append(len(kept) - before)
        self._add_forwards(table, outer, kept)
        self._add_recomputes(table, outer, real, root, chunk.steps)
        self._add_backwards(chunk.steps, len(chunk.backward_paths))
        if self._origin is None and chunk.steps:
            self._origin = chunk.steps[0].start
        origin = self._origin or 0
        self.rows.extend(step_row(st, origin) for st in chunk.steps)
        k = chunk.next_forward - chunk.first_forward
        if not 0 <= k < len(of_model):
            return None
        row = int(outer[of_model[k]])
        return _rows_from(table, row)

    def _add_forwards(self, table: CallTable, outer: Any, kept: list[int]) -> None:
        if not kept:
            return
        iteration = np.cumsum(table.level == 1, dtype=np.int64) - 1
        column = np.full(len(outer), -1, dtype=np.int64)
        column[kept] = np.arange(len(kept))
        picked = column[iteration]
        mask = picked >= 0
        sub = CallTable(
            layer=table.layer[mask], start=table.start[mask], end=table.end[mask],
            level=table.level[mask],
            device_start=None if table.device_start is None else table.device_start[mask],
            device_end=None if table.device_end is None else table.device_end[mask],
            iteration=picked[mask],
        )  # fmt: skip
        self.forward.add(sub, self.correction, len(kept))

    def _add_recomputes(
        self, table: CallTable, outer: Any, real: Any, root: int | None, steps: Sequence[StepMarks]
    ) -> None:
        """Outermost calls of a module other than the root inside a step's backward:
        ``torch.utils.checkpoint`` ran the module's forward again there."""
        starts = [st.start for st in steps]
        first = len(self.rows)
        for i in outer.tolist():
            if not real[i] or table.layer[i] == (-1 if root is None else root):
                continue
            start = int(table.start[i])
            k = _step_in_backward(steps, starts, start)
            if k is None:
                continue
            pid = int(table.layer[i])
            per_step = self._recompute.setdefault(pid, {})
            per_step[first + k] = per_step.get(first + k, 0) + int(table.end[i]) - start
            self._recompute_calls[pid] = self._recompute_calls.get(pid, 0) + 1

    def _add_backwards(self, steps: Sequence[StepMarks], n_paths: int) -> None:
        """Each backward (one per forward that got one) a column, numbered in order."""
        tables: list[CallTable] = []
        numbers: list[Any] = []
        n = 0
        for st in steps:
            before = n
            for forward in sorted(st.backward):
                table = st.backward[forward]
                tables.append(table)
                numbers.append(np.full(len(table), n, dtype=np.int64))
                n += 1
            self.backwards.append(n - before)
        if not n:
            return
        if self.backward is None:  # earlier steps' backwards (none with calls): zeros
            self.backward = SampleSums(n_paths, self.room, False, narrow=True)
            self.backward.add(CallTable.empty(), None, sum(self.backwards) - n)
        self.backward.widen(n_paths)
        whole = CallTable.concat(tables) if tables else CallTable.empty()
        iteration = np.concatenate(numbers) if numbers else np.zeros(0, dtype=np.int64)
        self.backward.add(replace(whole, iteration=iteration), None, n)

    def result(
        self, paths: Sequence[str], backward_paths: Sequence[str], schedule: StepSchedule
    ) -> tuple[dict[str, LayerSamples], TrainingLoop]:
        """The active steps' forward samples (with backward) and the loop section."""
        if not self.rows:
            raise UsageError(
                f"no step was active: the schedule skips {schedule.skip} and warms up over"
                f" {schedule.warmup} steps; call rec.step() once per step, after them too"
            )
        forward = self.forward.samples(paths)
        back = self.backward
        if back is not None and back.call_count:
            back.widen(len(backward_paths))
            times = back.samples(backward_paths)
            n = back.filled
            zeros = np.zeros(n, dtype=np.int64)
            zeros.flags.writeable = False
            for path, sample in forward.items():
                b = times.get(path)
                total, self_ = (b.total_ns, b.self_ns) if b else (Series(zeros), Series(zeros))
                forward[path] = replace(sample, backward_total_ns=total, backward_self_ns=self_)
        layers = tuple(
            _layer_steps(p, s, self.forwards, self.backwards) for p, s in forward.items()
        )
        recompute = tuple(
            Recompute(
                paths[pid],
                tuple(per_step.get(k, 0) for k in range(len(self.rows))),
                self._recompute_calls[pid],
            )
            for pid, per_step in sorted(self._recompute.items())
        )
        loop = TrainingLoop(
            tuple(self.rows), layers, schedule.skip, schedule.warmup, schedule.active, recompute
        )
        return forward, loop


def _rows_from(table: CallTable, row: int) -> CallTable:
    """The table's calls from ``row`` on (whole outermost calls when ``row`` starts one)."""

    def tail(a: Any) -> Any:
        return None if a is None else a[row:].copy()

    return CallTable(
        layer=tail(table.layer), start=tail(table.start), end=tail(table.end),
        level=tail(table.level), device_start=tail(table.device_start),
        device_end=tail(table.device_end),
    )  # fmt: skip


def _step_in_backward(steps: Sequence[StepMarks], starts: list[int], at: int) -> int | None:
    """The step (in time order; ``starts`` are theirs) whose backward ``at`` is in."""
    k = bisect.bisect_right(starts, at) - 1
    if k < 0:
        return None
    st = steps[k]
    return k if at <= st.end and any(a <= at <= b for a, b in st.backwards) else None


def _layer_steps(
    path: str, s: LayerSamples, forwards: list[int], backwards: list[int]
) -> LayerSteps:
    return LayerSteps(
        path=path,
        forward_total_ns=_per_step(s.total_ns, forwards) or (),
        forward_self_ns=_per_step(s.self_ns, forwards) or (),
        backward_total_ns=_per_step(s.backward_total_ns, backwards),
        backward_self_ns=_per_step(s.backward_self_ns, backwards),
    )


def _per_step(series: Series | None, counts: list[int]) -> IntValues | None:
    """Each step's sum of its columns; with one column per step, the row itself (a view:
    a long run's per-step values cost nothing beside its samples)."""
    if series is None or series.stored is None:
        return None
    values = series.stored
    if len(values) == len(counts) and all(c == 1 for c in counts):
        return IntValues(values)
    edges = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))
    sums = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
    return IntValues(sums[edges[1:]] - sums[edges[:-1]])
