"""A history as CSV or JSON (``history export``), and a view as JSON (``show --json``).

Milliseconds in the files, as every layerprof file (the store keeps ns). CSV: one
row per run and series (a figure, or a layer's self and total times); JSON
(``layerprof.history-export/1``): one object per run.
"""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any

from layerprof.history.records import iso_time
from layerprof.units import NS_PER_MS

if TYPE_CHECKING:
    from layerprof.history.changes import Change, HistoryView, Trend
    from layerprof.history.store import HistoryStore

EXPORT_SCHEMA = "layerprof.history-export/1"
VIEW_SCHEMA = "layerprof.history-view/1"

CSV_COLUMNS = (
    "run",
    "commit",
    "branch",
    "when",
    "env",
    "process",
    "kind",
    "name",
    "median_ms",
    "spread_ms",
    "total_ms",
    "total_spread_ms",
    "device_self_ms",
    "device_total_ms",
)


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def history_csv(store: HistoryStore) -> str:
    """Every run of the history, one row per figure and per layer."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for run, env in store.runs():
        head = [
            run.id,
            run.commit,
            run.branch or "",
            iso_time(run.when_ns),
            env.key,
            "" if run.process is None else run.process,
        ]
        for f in store.figures_of(run.id):
            writer.writerow([*head, "figure", f.name, _ms(f.median_ns), _ms(f.spread_ns)])
        for x in store.layers_of(run.id):
            writer.writerow(
                [
                    *head,
                    "layer",
                    x.path,
                    _ms(x.self_ns),
                    _ms(x.self_spread_ns),
                    _ms(x.total_ns),
                    _ms(x.total_spread_ns),
                    _ms(x.device_self_ns),
                    _ms(x.device_total_ns),
                ]
            )
    return out.getvalue()


def history_json(store: HistoryStore) -> bytes:
    """Every run of the history with its environment, figures and layers."""
    import orjson

    runs = []
    for run, env in store.runs():
        samples = store.latency_samples(run.id)
        runs.append(
            {
                "id": run.id,
                "commit": run.commit,
                "branch": run.branch,
                "when": iso_time(run.when_ns),
                "when_ns": run.when_ns,
                "source": run.source,
                "process": run.process,
                "env": {
                    "key": env.key,
                    "model": env.model,
                    "machine": env.machine,
                    "device": env.device,
                    "torch": env.torch,
                    "dtype": env.dtype,
                    "inputs": list(env.inputs),
                },
                "figures": {
                    f.name: {"median_ms": _ms(f.median_ns), "spread_ms": _ms(f.spread_ns), "n": f.n}
                    for f in store.figures_of(run.id)
                },
                "latency_samples_ms": None if samples is None else [s / NS_PER_MS for s in samples],
                "layers": [
                    {
                        "path": x.path,
                        "self_ms": _ms(x.self_ns),
                        "total_ms": _ms(x.total_ns),
                        "self_spread_ms": _ms(x.self_spread_ns),
                        "total_spread_ms": _ms(x.total_spread_ns),
                        "device_self_ms": _ms(x.device_self_ns),
                        "device_total_ms": _ms(x.device_total_ns),
                    }
                    for x in store.layers_of(run.id)
                ],
            }
        )
    return orjson.dumps({"schema": EXPORT_SCHEMA, "runs": runs}) + b"\n"


def view_json(view: HistoryView) -> dict[str, Any]:
    """What ``history show`` says, as JSON: the environment, the runs judged, each
    tested series' p-value and change points (ms, percent)."""
    det = view.detection
    return {
        "schema": VIEW_SCHEMA,
        "env": {"key": view.env.key, "description": view.env.describe()},
        "runs": [
            {
                "id": r.id,
                "commit": r.commit,
                "branch": r.branch,
                "when": iso_time(r.when_ns),
                "process": r.process,
            }
            for r in view.runs
        ],
        "total_runs": view.total_runs,
        "method": {
            "fdr": det.fdr,
            "confirm": det.confirm,
            "permutations": det.permutations,
            "level": det.level,
            "clock": view.clock,
            "min_share": view.min_share,
            "layers_against_common_drift": view.normalized,
            "alpha": view.alpha,
        },
        "too_short": view.too_short,
        "series": [_trend_json(t) for t in view.trends if t.tested],
        "changes": [_change_json(c) for c in view.changes],
    }


def _trend_json(t: Trend) -> dict[str, Any]:
    return {
        "name": t.series,
        "kind": t.kind,
        "share": t.share,
        "p": t.p,
        "values_ms": [_ms(v) for v in t.values_ns],
        "changes": [_change_json(c) for c in t.changes],
    }


def _change_json(c: Change) -> dict[str, Any]:
    return {
        "series": c.series,
        "kind": c.kind,
        "commit": c.run.commit,
        "previous_commit": c.previous.commit,
        "run_index": c.index,
        "percent": c.percent,
        "ci_percent": [(c.low - 1) * 100, (c.high - 1) * 100],
        "before_ms": _ms(c.before_ns),
        "after_ms": _ms(c.after_ns),
        "before_runs": c.before_runs,
        "after_runs": c.after_runs,
        "p": c.p,
    }
