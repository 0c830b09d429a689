"""Capture merge: ``analyze REPLAY --capture CAPTURE`` against the replay and the capture
each analyzed alone, in interleaved rounds.

Issue 44 allows the merge at most 1.2x of what reading the two files alone costs
(``analyze(replay)`` + ``analyze(capture)``, serial, in this process). Each round times
the three in turn (their order rotated each round, so machine noise hits every side
alike); the figure is the median over rounds of each round's ratio. Prints each
side's median seconds and the ratio.

    python benchmarks/capture_merge.py [FOLDER] [--repeat 5]

FOLDER holds a replay and ``capture_traces/`` (default: the vLLM pair in
tests/data/serving/, or ``../shared/traces/serving/vllm_decode_full`` when present:
the full, untrimmed files). Absolute seconds on a shared 2-core machine mean little:
read the ratio.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median

from layerprof.trace import analyze
from layerprof.trace.capturepair import analyze_pair, paired_captures, replay_in

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = (
    ROOT.parent / "shared" / "traces" / "serving" / "vllm_decode_full",
    ROOT / "tests" / "data" / "serving" / "vllm_decode_full",
)


def _timed(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    folder = args.folder or next(p for p in CANDIDATES if p.is_dir())
    captures = paired_captures(folder)
    assert captures, f"{folder}: no capture_traces/execution_details.json"
    replay = replay_in(folder)
    sides: dict[str, Callable[[], object]] = {
        "replay alone": lambda: analyze(replay, executor="serial"),
        "captures alone": lambda: [analyze(c.path, executor="serial") for c in captures],
        "merged": lambda: analyze_pair(replay, captures),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    ratios = []
    names = list(sides)
    _timed(sides["merged"])  # warm: imports, page cache
    for r in range(args.repeat):
        order = names[r % len(names) :] + names[: r % len(names)]
        got = {name: _timed(sides[name]) for name in order}
        for name, t in got.items():
            times[name].append(t)
        ratios.append(got["merged"] / (got["replay alone"] + got["captures alone"]))
    print(f"{folder}  ({args.repeat} interleaved rounds)")
    for name, ts in times.items():
        print(f"  {name:15s} median {median(ts):.3f} s  (min {min(ts):.3f}, max {max(ts):.3f})")
    print(
        f"  merged / (replay + captures alone): median {median(ratios):.2f}x"
        f" (rounds {min(ratios):.2f}-{max(ratios):.2f}; issue 44 allows 1.2x)"
    )


if __name__ == "__main__":
    main()
