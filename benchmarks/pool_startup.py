"""What a process pool costs before it pays: the figure behind ``POOL_START_SECONDS``.

Analyzes a directory of ``--ranks`` tiny traces (kilobytes: the work itself is
negligible) with ``serial`` and with ``processes=N``, interleaved, and prints
the median difference: the start-up of the forkserver and the workers, each
importing layerprof's reader. ``trace/jobs/executors.py`` runs ranks in a pool only
when its estimate of the serial work exceeds this plus the pool's share of the
work.

    python benchmarks/pool_startup.py [--ranks 2] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import orjson

from layerprof.trace import analyze
from layerprof.trace.jobs.executors import POOL_START_SECONDS
from layerprof.trace.jobs.tasks import cores


def tiny_trace(rank: int) -> bytes:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
         "ts": 100 * s, "dur": 90}
        for s in range(3)
    ] + [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100 * s + 5,
         "dur": 50}
        for s in range(3)
    ]  # fmt: skip
    return orjson.dumps({"distributedInfo": {"rank": rank}, "traceEvents": events})


def seconds(folder: Path, executor: str) -> float:
    start = time.perf_counter()
    analyze(folder, executor=executor)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    workers = min(args.ranks, cores())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for r in range(args.ranks):
            (folder / f"rank-{r}.json").write_bytes(tiny_trace(r))
        seconds(folder, "serial")  # warm this process's imports
        rounds = [
            (seconds(folder, "serial"), seconds(folder, f"processes={workers}"))
            for _ in range(args.repeat)
        ]
    start_up = median(pool - serial for serial, pool in rounds)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{args.ranks} tiny ranks, {workers} workers, {args.repeat} interleaved rounds,"
        f" load average {load:.1f}: serial {median(r[0] for r in rounds) * 1e3:.0f} ms,"
        f" pool {median(r[1] for r in rounds) * 1e3:.0f} ms;"
        f" pool start-up {start_up * 1e3:.0f} ms (POOL_START_SECONDS = {POOL_START_SECONDS})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
