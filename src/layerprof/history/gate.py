"""``history check``: does the newest part of a history hold a regression?

A series fails the check when its latest change point (a) passed the
false-discovery control of ``changes.analyze`` (beyond the history's own noise),
(b) started within the newest ``recent`` runs, and (c) made it slower by more than
``fail_above`` percent (the Hodges-Lehmann estimate). A change needs
``Detection.confirm`` runs after it, so a slowdown seen in fewer runs is reported
as not confirmed yet and does not fail; a history shorter than
``Detection.shortest`` runs is too short to judge.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerprof.history.changes import Change, HistoryView

#: How many of the newest runs a change must start in to fail the check.
RECENT = 10


@dataclass(frozen=True)
class Verdict:
    """The check's outcome: ``regressions`` fail it; ``reason`` says why it passed or
    failed in one line; ``other`` holds the recent changes that did not fail it
    (speed-ups, or slowdowns within the threshold)."""

    failed: bool
    reason: str
    regressions: tuple[Change, ...] = ()
    other: tuple[Change, ...] = ()
    too_short: bool = False


def judge(view: HistoryView, *, fail_above: float, recent: int = RECENT) -> Verdict:
    """The verdict of ``view``'s newest ``recent`` runs at ``fail_above`` percent."""
    n = len(view.runs)
    if view.too_short:
        return Verdict(
            failed=False,
            too_short=True,
            reason=f"too short to judge: {n} run{'s' if n != 1 else ''} of this environment;"
            f" a change needs {view.detection.confirm} runs on each side"
            f" ({view.detection.shortest} in all)",
        )
    latest = [t.changes[-1] for t in view.trends if t.changes]
    recent_changes = [c for c in latest if c.index >= n - recent]
    bad = tuple(c for c in recent_changes if c.percent > fail_above)
    other = tuple(c for c in recent_changes if c not in bad)
    if bad:
        worst = max(bad, key=lambda c: c.percent)
        reason = (
            f"{len(bad)} regression{'s' if len(bad) > 1 else ''} beyond the noise and"
            f" {fail_above:g}%: {describe(worst)}"
        )
        return Verdict(True, reason, tuple(sorted(bad, key=lambda c: -c.percent)), other)
    return Verdict(
        False,
        f"no change beyond the noise and {fail_above:g}% in the newest {min(recent, n)} of"
        f" {n} runs ({view.tested} series tested at a false-discovery rate of"
        f" {view.detection.fdr:g})",
        other=other,
    )


def describe(change: Change) -> str:
    """``layer`` +15.2 % (95 % CI +12.1..+18.0 %) since commit abc1234 (run 20 of 40)."""
    what = "latency" if change.series == "latency" else _name(change)
    return (
        f"{what} {change.percent:+.1f}% (CI {_pct(change.low)}..{_pct(change.high)})"
        f" since commit {change.run.short}, over {change.after_runs} runs"
    )


def _name(change: Change) -> str:
    if change.kind == "figure":
        return change.series
    return f"layer {change.series or '(root)'}"


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"
