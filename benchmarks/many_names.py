"""Cost of a trace with many distinct operator names (issue 43, item 16): 200k names in
a 20 MB trace took 46 s and 1.5 GB with ``analyze --json``.

Writes a Kineto-like CPU trace of ``--names`` distinct ``cpu_op`` names (each called
``--calls`` times) under one ``ProfilerStep#1`` span, then runs ``layerprof analyze
TRACE --json OUT`` in a fresh process ``--rounds`` times and prints the median wall
time, the peak resident memory (``wait4``'s ``ru_maxrss``, per process) and the
sizes of the trace and of the JSON written. Run on a quiet machine; no torch needed.

    python benchmarks/many_names.py [--names 200000] [--calls 1] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson


def write_trace(path: Path, names: int, calls: int) -> Path:
    """One step on one thread: ``names * calls`` 1 us operator spans, 1 us apart."""
    events: list[dict[str, object]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 2 * names * calls + 10},
    ]  # fmt: skip
    ts = 1
    for _ in range(calls):
        for i in range(names):
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": f"aten::custom_op_{i:07d}", "pid": 1,
                 "tid": 1, "ts": ts, "dur": 1 + i % 5, "args": {"External id": ts}}
            )  # fmt: skip
            ts += 2 + i % 5
    events[0]["dur"] = ts + 1
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    return path


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MB of one ``layerprof`` process."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "layerprof", *argv], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"layerprof {' '.join(argv)} failed")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--names", type=int, default=200_000)
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = write_trace(Path(tmp) / "names.json", args.names, args.calls)
        out = Path(tmp) / "out.json"
        runs = [
            timed(["analyze", str(trace), "--json", str(out), "-q"]) for _ in range(args.rounds)
        ]
        wall = statistics.median(r[0] for r in runs)
        peak = statistics.median(r[1] for r in runs)
        print(
            f"{args.names} names x {args.calls}: trace {trace.stat().st_size / 1e6:.1f} MB,"
            f" analyze --json {wall:.1f} s, peak {peak:.0f} MB,"
            f" JSON {out.stat().st_size / 1e6:.1f} MB"
        )


if __name__ == "__main__":
    main()
