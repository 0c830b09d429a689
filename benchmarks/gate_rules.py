"""Which between-run rule should the gate use? Judged offline on saved processes.

``gate_false_alarms.py`` runs the whole ``diff --run`` end to end; to compare
rules without rerunning processes, this script saves every process once and
then judges resampled comparisons with ``layerprof.diff`` itself, two ways:

* ``ratio``: the rule ``diff`` uses (each layer's time relative to the rest of
  its own forward, per round);
* ``medians``: the same profiles with ``rest_ratio`` dropped, i.e. the
  per-process medians (the rule before it).

Collect (per round: a base, two identical copies and the slowed model, in a
rotating order), then evaluate::

    python benchmarks/gate_rules.py collect runs/ --rounds 10
    python benchmarks/gate_rules.py evaluate runs/ --rounds 10 --draws 300

An identical comparison pairs two of the three unchanged processes of each
round (drawn at random); a slowed one pairs an unchanged process with the
slowed one. Every identical comparison that fails the gate is a false alarm.
Timings on a loaded machine are not figures; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from layerprof.analysis.diff import diff  # noqa: E402
from layerprof.analysis.gate import gate as gate_of  # noqa: E402
from layerprof.cli.processes import gather  # noqa: E402
from layerprof.pivot.profile import Profile  # noqa: E402

SLOWED = "encoder.0.ffn.up"
SAME = ("base", "same1", "same2")


def collect(out: Path, rounds: int, iters: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    variants = (*SAME, "slow")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for r in range(rounds):
        for j in range(len(variants)):
            v = variants[(j + r) % len(variants)]
            kwargs = json.dumps({"layers": 4, "slow": 0.1 if v == "slow" else 0.0})
            subprocess.run(
                [sys.executable, "-m", "layerprof", "run", "--arch",
                 "benchmarks.gate_false_alarms:Bert", "--arch-kwargs", kwargs,
                 "--input", "1x128:int64[0,30000)", "--warmup", "3", "--iters", str(iters),
                 "--threads", "1", "--samples", "--json", str(out / f"{v}_r{r}.json"), "-q"],
                cwd=ROOT, env=env, check=True,
            )  # fmt: skip
            print(f"round {r}: {v} ({os.getloadavg()[0]:.2f} load)", flush=True)


def judge(base: list[Profile], new: list[Profile], ratios: bool) -> tuple[bool, float, float]:
    """(gate failed on a layer, the slowed row's change %, its p-value) for one comparison."""
    keys = list(range(len(base)))
    b = gather(base, rounds=keys, session="s", side="base")
    n = gather(new, rounds=keys, session="s", side="new")
    if not ratios:
        assert b.repeats is not None and n.repeats is not None
        b = replace(b, repeats=replace(b.repeats, runs=tuple(
            replace(r, rest_ratio=None) for r in b.repeats.runs)))  # fmt: skip
        n = replace(n, repeats=replace(n.repeats, runs=tuple(
            replace(r, rest_ratio=None) for r in n.repeats.runs)))  # fmt: skip
    d = diff(b, n)
    row = next(r for r in d.layers if r.path == SLOWED).change
    return gate_of(d, 5.0, "layers").failed, row.delta_pct or 0.0, row.p_value or 1.0


def evaluate(src: Path, rounds: int, draws: int) -> None:
    have = sorted(
        int(p.stem.split("_r")[1])
        for p in src.glob("slow_r*.json")
        if all((src / f"{v}_r{p.stem.split('_r')[1]}.json").exists() for v in SAME)
    )
    if len(have) < rounds:
        sys.exit(f"{src} holds {len(have)} complete rounds, fewer than --rounds {rounds}")
    cache: dict[tuple[str, int], Profile] = {}

    def load(v: str, r: int) -> Profile:
        if (v, r) not in cache:
            cache[v, r] = Profile.load(src / f"{v}_r{r}.json")
        return cache[v, r]

    rng = np.random.default_rng(0)
    for ratios in (False, True):
        false_alarms = caught = 0
        changes, ps = [], []
        for _ in range(draws):
            rs = rng.choice(have, rounds, replace=False)
            pick = [rng.choice(3, 2, replace=False) for _ in rs]
            base = [load(SAME[a], r) for (a, _), r in zip(pick, rs, strict=True)]
            same = [load(SAME[b], r) for (_, b), r in zip(pick, rs, strict=True)]
            false_alarms += judge(base, same, ratios)[0]
            failed, pct, p = judge(base, [load("slow", r) for r in rs], ratios)
            caught += failed
            changes.append(pct)
            ps.append(p)
        name = "ratio  " if ratios else "medians"
        print(
            f"{name}: identical comparisons failing {false_alarms}/{draws};"
            f" slowed caught {caught}/{draws}; its change {np.median(changes):+.1f} %"
            f" [{np.quantile(changes, 0.1):+.1f}, {np.quantile(changes, 0.9):+.1f}]"
            f" (10-90 %), median p {np.median(ps):.2g}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("collect", "evaluate"))
    parser.add_argument("dir", type=Path)
    parser.add_argument("--rounds", type=int, default=10, help="rounds (10)")
    parser.add_argument("--iters", type=int, default=30, help="timed forwards (30)")
    parser.add_argument("--draws", type=int, default=300, help="resampled comparisons (300)")
    args = parser.parse_args()
    if args.what == "collect":
        collect(args.dir, args.rounds, args.iters)
    else:
        evaluate(args.dir, args.rounds, args.draws)


if __name__ == "__main__":
    main()
