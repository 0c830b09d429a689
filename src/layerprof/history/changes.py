"""A window of runs -> each series' trend and change points (``HistoryView``).

The series tested together are the run-level figures (latency, a generate's
time to first token...) and every heavy layer's self time (a median share of
the run's summed self time of at least ``min_share``). A figure is tested on its
log times as they are: its change must stand out of the run-to-run drift. A layer
is tested on its log time less the drift all layers share in that run
(``series.common_factor``), so its change is one against the rest of the model,
and a process that ran 30 % slow throughout moves no layer. Benjamini-Hochberg at
``Detection.fdr`` over all of them, then binary segmentation of each series found
(``changepoints``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from layerprof.history import changepoints
from layerprof.history.changepoints import Detection
from layerprof.history.records import Environment, StoredRun
from layerprof.history.series import CommonFactor, Window, common_factor, log_times, shares

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Floats = npt.NDArray[np.float64]

Kind = Literal["figure", "layer"]
Clock = Literal["host", "device"]

#: A series before testing: name, kind, raw ns per run, the values tested, layer share.
_Candidate = tuple[str, Kind, "Floats", "Floats", float | None]

#: A layer is tested when its median share of the run's self time is at least this.
MIN_SHARE = 0.01


@dataclass(frozen=True)
class Change:
    """A change point of one series: it starts at ``run`` (``previous`` is the last run
    before it); ``ratio`` is the size (after / before, the Hodges-Lehmann estimate)
    with its interval ``low``..``high``; ``before_ns``/``after_ns`` the raw medians of
    the two segments (``before_runs`` and ``after_runs`` runs); ``p`` the p-value of
    the test that found it."""

    series: str
    kind: Kind
    run: StoredRun
    previous: StoredRun
    index: int  # the run's position in the window
    ratio: float
    low: float
    high: float
    before_ns: float
    after_ns: float
    before_runs: int
    after_runs: int
    p: float

    @property
    def percent(self) -> float:
        return (self.ratio - 1.0) * 100.0


@dataclass(frozen=True)
class Trend:
    """One series over the window: its value per run (ns, None where absent; empty for
    a series not tested), the
    layer's median share of the run's self time, whether it was tested (heavy enough
    and long enough), its whole-window p-value, and its change points."""

    series: str
    kind: Kind
    values_ns: tuple[float | None, ...]
    share: float | None
    tested: bool
    p: float
    changes: tuple[Change, ...] = ()

    @property
    def label(self) -> str:
        return self.series if self.kind == "figure" else (self.series or "(root)")


@dataclass(frozen=True)
class HistoryView:
    """What a history says about one environment's newest runs."""

    env: Environment
    runs: tuple[StoredRun, ...]
    total_runs: int
    trends: tuple[Trend, ...]
    detection: Detection
    clock: Clock
    min_share: float
    normalized: bool  # layers tested against the drift all layers share
    alpha: float  # the Benjamini-Hochberg level the changes passed (-1: none did)
    tested: int

    @property
    def changes(self) -> tuple[Change, ...]:
        """Every change point, the newest first."""
        found = [c for t in self.trends for c in t.changes]
        return tuple(sorted(found, key=lambda c: (-c.index, c.kind, c.series)))

    @property
    def too_short(self) -> bool:
        return len(self.runs) < self.detection.shortest

    def method(self) -> str:
        """How the series were judged, in one line (console and HTML)."""
        d = self.detection
        against = (
            "layers against the drift all layers share in a run"
            if self.normalized
            else "layers on their raw times (too few layers to divide out a common drift)"
        )
        return (
            f"{self.tested} series tested ({self.clock} self times; layers with >="
            f" {self.min_share * 100:g}% of the self time), {against}; rank scan with a"
            f" permutation test, false-discovery rate {d.fdr:g}, a change needs {d.confirm}"
            f" runs on each side; sizes are Hodges-Lehmann estimates with"
            f" {d.level * 100:g}% intervals"
        )

    def trend(self, series: str) -> Trend | None:
        return next((t for t in self.trends if t.series == series), None)


def analyze(
    window: Window,
    detection: Detection | None = None,
    *,
    min_share: float = MIN_SHARE,
    clock: Clock = "host",
    layers: tuple[str, ...] = (),
) -> HistoryView:
    """Trends and change points of ``window``; ``layers`` are tested whatever their share."""
    import numpy as np

    detection = detection or Detection()
    times = window.layer_times(clock)
    if times is None:
        times = np.full((len(window.paths), len(window.runs)), np.nan)
    share = shares(times)
    heavy = np.flatnonzero((share >= min_share) | np.isin(np.array(window.paths), layers))
    factor = common_factor(times, heavy)
    trends, alpha, tested = _judge(window, times, share, heavy, factor, detection)
    steps = {
        row: [c.index for c in t.changes]
        for row, t in enumerate(trends[len(window.figures) :])
        if t.changes
    }
    if factor is not None and steps:  # again, with the changed layers' steps out of the drift
        factor = common_factor(times, heavy, steps)
        trends, alpha, tested = _judge(window, times, share, heavy, factor, detection)
    figures, rest = trends[: len(window.figures)], trends[len(window.figures) :]
    rest.sort(key=lambda t: -(t.share or 0.0))  # the heaviest layers first
    return HistoryView(
        env=window.env,
        runs=window.runs,
        total_runs=window.total_runs,
        trends=(*figures, *rest),
        detection=detection,
        clock=clock,
        min_share=min_share,
        normalized=factor is not None,
        alpha=alpha,
        tested=tested,
    )


def _judge(
    window: Window,
    times: Floats,
    share: Floats,
    heavy: npt.NDArray[np.int64],
    factor: CommonFactor | None,
    detection: Detection,
) -> tuple[list[Trend], float, int]:
    """Every series' trend (figures first, then layers in window order), the
    Benjamini-Hochberg level, and how many series were tested."""
    import numpy as np

    candidates: list[_Candidate] = []
    for name in sorted(window.figures, key=lambda n: (n != "latency", n)):
        raw = window.figures[name]
        candidates.append((name, "figure", raw, log_times(raw), None))
    tested = {len(window.figures) + int(i) for i in heavy}
    tested.update(range(len(window.figures)))
    for row in range(len(window.paths)):
        raw = times[row]
        logs = log_times(raw) - (factor.of(row) if factor is not None else 0.0)
        candidates.append((window.paths[row], "layer", raw, logs, float(share[row])))
    pvalues = {
        i: changepoints.whole_p(c[3][~np.isnan(c[3])], detection)
        for i, c in enumerate(candidates)
        if i in tested
    }
    alpha = _level(list(pvalues.values()), detection.fdr)
    trends = [_trend(window, c, pvalues.get(i), alpha, detection) for i, c in enumerate(candidates)]
    return trends, alpha, len(pvalues)


def _level(pvalues: list[float], q: float) -> float:
    """The Benjamini-Hochberg level: ``q`` times the share of the series rejected."""
    if not pvalues or changepoints.fdr_threshold(pvalues, q) < 0:
        return -1.0
    rejected = sum(p <= changepoints.fdr_threshold(pvalues, q) for p in pvalues)
    return q * rejected / len(pvalues)


def _trend(
    window: Window,
    candidate: _Candidate,
    p: float | None,
    alpha: float,
    detection: Detection,
) -> Trend:
    import numpy as np

    name, kind, raw, logs, share = candidate
    if p is None:  # not tested: neither shown nor judged (its values stay in the window)
        return Trend(name, kind, (), share, tested=False, p=1.0)
    values = tuple(None if math.isnan(v) else float(v) for v in raw.tolist())
    changes: tuple[Change, ...] = ()
    if p <= alpha:
        present = np.flatnonzero(~np.isnan(logs))
        splits = changepoints.segment(logs[present], alpha, detection)
        changes = tuple(_change(window, name, kind, raw, present, s) for s in splits)
    return Trend(name, kind, values, share, tested=True, p=p, changes=changes)


def _change(
    window: Window,
    name: str,
    kind: Kind,
    raw: Floats,
    present: npt.NDArray[np.int64],
    split: changepoints.Split,
) -> Change:
    import numpy as np

    at = int(present[split.index])
    before = present[split.index - split.before : split.index]
    after = present[split.index : split.index + split.after]
    return Change(
        series=name,
        kind=kind,
        run=window.runs[at],
        previous=window.runs[int(present[split.index - 1])],
        index=at,
        ratio=math.exp(split.shift),
        low=math.exp(split.low),
        high=math.exp(split.high),
        before_ns=float(np.median(raw[before])),
        after_ns=float(np.median(raw[after])),
        before_runs=split.before,
        after_runs=split.after,
        p=split.p,
    )
