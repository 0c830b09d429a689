"""Where a Recorder's calls go once the log compacts them: one of three accumulators.

* ``KeptTables`` (the default): the log's tables are kept, 24 bytes a call, and
  reduced at ``profile()``, which decides the correction then;
* ``StreamSums`` (``Recorder.stream``): each table is summed per layer and
  forward as it is made, the correction decided when streaming starts;
* ``TrainingSteps`` (``training.py``, ``Recorder(backward=True)``): the ended
  active steps are reduced to per-layer sums every few hundred steps
  (``LoopRecord``), the correction decided at the first sums.

The Recorder holds one and asks it the same questions whichever it is
(``Accumulator``): where a compacted table goes, how much was summed, whether
the calls can still be listed, the samples, and how to forget them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from layerprof.capture.recording.forwardlog import ForwardLog
from layerprof.capture.recording.layertimes import CallTable, Correction, SampleSums, build_samples
from layerprof.errors import UsageError
from layerprof.pivot.records import LayerSamples
from layerprof.pivot.sections.loop import TrainingLoop

#: The correction a record is reduced with, for ``profile(correct=...)`` (None: the default).
Decide = Callable[[bool | None], Correction | None]


@dataclass(frozen=True)
class Totals:
    """What ``profile()`` reads off an accumulator: each layer's samples, the correction
    they carry, the forwards and layer calls they hold, and a training loop's section."""

    samples: dict[str, LayerSamples]
    correction: Correction | None
    iterations: int
    calls: int
    loop: TrainingLoop | None = None


class Accumulator(Protocol):
    """What the Recorder asks of its record, whichever accumulator holds it."""

    @property
    def plain(self) -> bool:
        """Each outermost call an iteration of its own, not summed (streamed or a training
        loop's steps): the record a generation section is read from."""
        ...

    def sink(self) -> Callable[[CallTable], None] | None:
        """Where the log hands a compacted table (None: the log keeps it)."""
        ...

    def summed(self) -> tuple[int, int]:
        """Forwards and layer calls summed so far, outside the log's tables."""
        ...

    def check_calls(self) -> None:
        """Raise a UsageError when the calls were summed and cannot be listed."""
        ...

    def totals(self, correct: bool | None) -> Totals:
        """The record reduced (``correct``: ``profile(correct=...)``)."""
        ...

    def reset(self) -> None:
        """Forget what was summed (``Recorder.reset``; the Recorder clears the log)."""
        ...


class KeptTables:
    """The log's tables kept until ``profile()`` reduces them (the default)."""

    plain = True

    def __init__(self, log: ForwardLog, paths: Sequence[str], decide: Decide) -> None:
        self._log, self._paths, self._decide = log, paths, decide

    def sink(self) -> Callable[[CallTable], None] | None:
        return None

    def summed(self) -> tuple[int, int]:
        return 0, 0

    def check_calls(self) -> None:
        return None

    def totals(self, correct: bool | None) -> Totals:
        tables = self._log.tables
        iterations = sum(int((t.level == 1).sum()) for t in tables)
        calls = sum(int((t.layer >= 0).sum()) for t in tables)
        correction = self._decide(correct)
        samples = build_samples(tables, iterations, correction, list(self._paths))
        return Totals(samples, correction, iterations, calls)

    def reset(self) -> None:
        return None


class StreamSums:
    """Each table summed per layer and forward as it is made (``Recorder.stream``), with
    the correction decided when streaming started (``correct``: whether it was wanted)."""

    plain = False

    def __init__(
        self, sums: SampleSums, correction: Correction | None, correct: bool, paths: Sequence[str]
    ) -> None:
        self.sums, self.correction, self.correct = sums, correction, correct
        self._paths = paths

    @classmethod
    def of_log(
        cls,
        log: ForwardLog,
        paths: Sequence[str],
        iterations: int,
        correction: Correction | None,
        correct: bool,
    ) -> StreamSums:
        """Sums with room for ``iterations`` forwards, holding the log's tables so far (the
        log keeps none after)."""
        sums = SampleSums(len(paths), iterations, log.device_clock is not None)
        for table in log.tables:
            sums.add(table, correction)
        log.tables.clear()
        return cls(sums, correction, correct, paths)

    def sink(self) -> Callable[[CallTable], None] | None:
        return functools.partial(self.sums.add, correction=self.correction)

    def summed(self) -> tuple[int, int]:
        return self.sums.filled, self.sums.call_count

    def check_calls(self) -> None:
        if self.sums.filled:
            raise UsageError(
                "Recorder.calls(): the calls were summed per layer as they were recorded"
                " (stream()); only profile() has them"
            )

    def totals(self, correct: bool | None) -> Totals:
        if correct is not None and correct != self.correct:
            raise UsageError(
                f"Recorder.profile(correct={correct}): the record was summed with"
                f" correct={self.correct} (stream())"
            )
        sums = self.sums
        return Totals(sums.samples(self._paths), self.correction, sums.filled, sums.call_count)

    def reset(self) -> None:
        """Nothing summed any more, with room for as many forwards."""
        old = self.sums
        self.sums = SampleSums(old.n_paths, old.total.shape[1], old.device is not None)
