"""The history's change points: false-alarm rate and power, on seeded synthetic histories.

Deterministic (every history from its own seed; the permutation null from a fixed
seed). A history is ``--before`` runs, then ``--after`` runs after a change, of a
model of six heavy layers plus a root (costs in ``tests/support/history_runs.py``):
each run's times are the layer costs x one drift factor for the whole process
(``drift ** U(-1/2, 1/2)``: runs differ by up to ``drift - 1``) x each layer's own
noise (log-normal, ``--noise``). Judged with the defaults (``Detection()``,
min share 1 %), exactly as ``layerprof history show`` judges a window.

* **False alarms**: histories without a change, with 30 % drift and one run 2x slow
  throughout (``--bad-run``): the share of histories with any change point at all,
  and per series tested.
* **Power**: one layer (``block1``, 26 % of the time) made slower by a step at run
  ``--before``: the share of histories where that layer's change is found at its run
  +-1 with no other layer flagged (the latency may move with it: a true change). Also a change of the whole model (every layer, so
  only the latency series can show it, against the drift).

    python benchmarks/history_power.py [--histories 200] [--before 40] [--after 10]
                                       [--noise 0.03] [--drift 1.3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.history_runs import ENV, LAYERS, Shape, self_times

from layerprof.history.changes import analyze
from layerprof.history.records import StoredRun
from layerprof.history.series import Window

STEPS = (1.02, 1.03, 1.05, 1.075, 1.10, 1.15, 1.20, 1.30, 1.50)


def window_of(times: list[dict[str, int]], whole: float = 1.0, at: int = 0) -> Window:
    """A window straight from per-run self times (what the store would hand back);
    ``whole`` multiplies every layer from run ``at`` on (a change of the whole model)."""
    paths = tuple(p for p, _, _ in LAYERS)
    matrix = np.array([[t[p] for t in times] for p in paths], dtype=np.float64)
    matrix[:, at:] *= whole
    runs = tuple(StoredRun(i + 1, f"c{i:03d}", None, i, ENV.key) for i in range(len(times)))
    figures = {"latency": matrix.sum(axis=0)}
    return Window(ENV, runs, len(runs), figures, paths, matrix, matrix.copy())


def false_alarms(args: argparse.Namespace) -> None:
    histories = alarmed = series = flagged = 0
    n = args.before + args.after
    for seed in range(args.histories):
        shape = Shape(
            runs=n,
            drift=args.drift,
            noise=args.noise,
            outlier_run=(seed * 7) % n if args.bad_run else None,
        )
        view = analyze(window_of(self_times(shape, 10_000 + seed)))
        histories += 1
        alarmed += bool(view.changes)
        series += view.tested
        flagged += sum(1 for t in view.trends if t.changes)
    print(
        f"false alarms: {alarmed}/{histories} histories of {n} runs with any change point"
        f" ({alarmed / histories:.1%}); {flagged}/{series} series ({flagged / series:.2%})"
        f"  [drift {args.drift - 1:.0%}, noise {args.noise:.0%}, bad run {args.bad_run}]"
    )


def power(args: argparse.Namespace) -> None:
    n = args.before + args.after
    print(
        f"power: a step at run {args.before} of {n} ({args.after} runs after it),"
        f" {args.histories} histories per size"
    )
    print(f"  {'step':>6}  {'one layer (block1)':>20}  {'whole model (latency)':>22}")
    for step in STEPS:
        layer_hits = whole_hits = 0
        for seed in range(args.histories):
            shape = Shape(
                runs=n,
                drift=args.drift,
                noise=args.noise,
                step_layer="block1",
                step_at=args.before,
                step=step,
            )
            view = analyze(window_of(self_times(shape, 20_000 + seed)))
            # latency moves too (block1 is a quarter of it): a true change, not counted
            found = [(c.series, c.index) for c in view.changes if c.kind == "layer"]
            layer_hits += (
                len(found) == 1
                and found[0][0] == "block1"
                and (abs(found[0][1] - args.before) <= 1)
            )
            flat = Shape(runs=n, drift=args.drift, noise=args.noise)
            whole = analyze(window_of(self_times(flat, 30_000 + seed), step, args.before))
            lat = [c for c in whole.changes if c.series == "latency"]
            whole_hits += bool(lat) and abs(lat[0].index - args.before) <= 1
        h = args.histories
        print(f"  {step - 1:>+6.1%}  {layer_hits / h:>20.0%}  {whole_hits / h:>22.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--histories", type=int, default=200)
    parser.add_argument("--before", type=int, default=40)
    parser.add_argument("--after", type=int, default=10)
    parser.add_argument("--noise", type=float, default=0.03)
    parser.add_argument("--drift", type=float, default=1.3)
    parser.add_argument("--bad-run", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--skip-power", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    false_alarms(args)
    if not args.skip_power:
        power(args)
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
