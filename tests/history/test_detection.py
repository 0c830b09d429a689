"""Change points on synthetic histories (seeded, exact costs): where a step is found,
in which series, and how many alarms drift and a bad run raise."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerprof.history.changes import analyze
from layerprof.history.store import HistoryStore
from tests.support.history_runs import ENV, Shape, entries

SEEDS = range(8)


def view_of(tmp_path: Path, shape: Shape, seed: int):  # type: ignore[no-untyped-def]
    with HistoryStore(tmp_path / f"h{seed}.db", create=True) as store:
        store.add(entries(shape, seed))
        return analyze(store.window(ENV, 100))


@pytest.mark.parametrize("seed", SEEDS)
def test_a_15_percent_step_in_one_layer_is_found_at_its_run_in_that_layer_only(
    tmp_path: Path, seed: int
) -> None:
    shape = Shape(runs=40, drift=1.3, step_layer="block1", step_at=20, step=1.15)
    view = view_of(tmp_path, shape, seed)
    assert [c.series for c in view.changes] == ["block1"], view.changes
    (change,) = view.changes
    assert abs(change.index - 20) <= 1
    assert change.run.commit in {"c019", "c020", "c021"}
    assert abs(change.ratio - 1.15) < 0.04  # sized within 4 points of the true 15 %
    assert 1.0 < change.low < change.ratio < change.high  # a slowdown, its interval clear of 0
    assert change.after_runs >= 3 and change.before_runs >= 3


@pytest.mark.parametrize("seed", SEEDS)
def test_drift_between_runs_and_one_bad_run_raise_no_alarm(tmp_path: Path, seed: int) -> None:
    shape = Shape(runs=40, drift=1.3, outlier_run=13 + seed, outlier=2.0)
    view = view_of(tmp_path, shape, seed)
    assert view.tested == 1 + 6  # latency and six layers (the root's 0.7 % is below 1 %)
    assert view.changes == ()


@pytest.mark.parametrize("seed", SEEDS)
def test_40_percent_drift_raises_no_alarm_either(tmp_path: Path, seed: int) -> None:
    view = view_of(tmp_path, Shape(runs=40, drift=1.4, outlier_run=5), seed)
    assert view.changes == ()


def test_a_step_is_not_confirmed_by_fewer_runs_than_confirm(tmp_path: Path) -> None:
    """A change in the newest two runs is no change point yet (never one run, or two);
    with eight runs after it, it is, at its run."""
    shape = Shape(runs=40, step_layer="head", step_at=38, step=2.0)
    assert view_of(tmp_path, shape, 0).changes == ()
    confirmed = view_of(tmp_path, Shape(runs=40, step_layer="head", step_at=32, step=1.5), 1)
    assert [(c.series, c.index) for c in confirmed.changes] == [("head", 32)]


def test_a_process_that_is_slow_throughout_moves_no_layer(tmp_path: Path) -> None:
    """Half the runs 25 % slower everywhere (a new machine state): latency changes, the
    layers, judged against the drift they share, do not."""
    shape = Shape(runs=40, drift=1.02)
    runs = entries(shape, 3)
    from dataclasses import replace

    from layerprof.history.records import Figure, LayerPoint

    slow = [
        replace(
            r,
            layers=tuple(
                LayerPoint(x.path, round(x.self_ns * 1.25), round(x.total_ns * 1.25))
                for x in r.layers
            ),
            figures=tuple(Figure(f.name, round(f.median_ns * 1.25)) for f in r.figures),
        )
        if i >= 20
        else r
        for i, r in enumerate(runs)
    ]
    with HistoryStore(tmp_path / "h.db", create=True) as store:
        store.add(slow)
        view = analyze(store.window(ENV, 100))
    assert [(c.series, c.index) for c in view.changes] == [("latency", 20)]
    assert 1.2 < view.changes[0].ratio < 1.3


def test_a_single_layer_outlier_run_is_one_rank(tmp_path: Path) -> None:
    """One run where only one layer took 5x: no alarm (ranks, not means)."""
    runs = entries(Shape(runs=40), 4)
    from dataclasses import replace

    from layerprof.history.records import LayerPoint

    i = 30
    bad = replace(
        runs[i],
        layers=tuple(
            LayerPoint(x.path, x.self_ns * 5, x.total_ns * 5) if x.path == "block0" else x
            for x in runs[i].layers
        ),
    )
    with HistoryStore(tmp_path / "h.db", create=True) as store:
        store.add([*runs[:i], bad, *runs[i + 1 :]])
        assert analyze(store.window(ENV, 100)).changes == ()


def test_two_changes_in_one_layer_are_both_located(tmp_path: Path) -> None:
    """Binary segmentation: up 30 % at run 15, up 30 % again at run 30."""
    runs = entries(Shape(runs=45, drift=1.2), 5)
    from dataclasses import replace

    from layerprof.history.records import LayerPoint

    def bump(run, k):  # type: ignore[no-untyped-def]
        return replace(
            run,
            layers=tuple(
                LayerPoint(x.path, round(x.self_ns * k), x.total_ns) if x.path == "embed" else x
                for x in run.layers
            ),
        )

    shaped = [bump(r, 1.3 ** ((i >= 15) + (i >= 30))) for i, r in enumerate(runs)]
    with HistoryStore(tmp_path / "h.db", create=True) as store:
        store.add(shaped)
        view = analyze(store.window(ENV, 100))
    found = [(c.series, c.index, c.ratio > 1) for c in sorted(view.changes, key=lambda c: c.index)]
    assert found == [("embed", 15, True), ("embed", 30, True)]


def test_device_times_are_judged_with_clock_device(tmp_path: Path) -> None:
    """A step in one layer's device time only: --clock device finds it, host does not."""
    from dataclasses import replace

    runs = entries(Shape(runs=40), 6)
    with_device = [
        replace(
            r,
            layers=tuple(
                replace(
                    x,
                    device_self_ns=round(
                        x.self_ns * (1.5 if x.path == "head" and i >= 25 else 1.0)
                    ),
                )
                for x in r.layers
            ),
        )
        for i, r in enumerate(runs)
    ]
    with HistoryStore(tmp_path / "h.db", create=True) as store:
        store.add(with_device)
        window = store.window(ENV, 100)
    assert analyze(window).changes == ()
    found = analyze(window, clock="device").changes
    assert [(c.series, c.index) for c in found] == [("head", 25)]
