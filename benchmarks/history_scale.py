"""A history at scale: build one of ``--runs`` runs x ``--layers`` layers, then time
``history show`` and ``history check`` on it and report the file's size.

The issue's target: 10,000 runs x 1,000 layers, show and check under 1 s each, the
file under 1 GB. Building that takes minutes (10 M layer rows); ``--runs 1000``
is a short run, and the size grows linearly with the rows (reported per row).
Layer costs fall off as 1/rank (a few heavy layers, a long tail: ~13 of 1,000
above the 1 % that ``--min-share`` tests by default); each run drifts as a whole
and each layer has its own noise. Seeded; the timings are this machine's.

Timed in-process (best of ``--repeat``; the command's body: open, window, judge,
print to a null console) and as the whole ``layerprof history`` process, once.

    python benchmarks/history_scale.py [--runs 10000] [--layers 1000] [--db PATH]
                                       [--keep] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from layerprof.history.changepoints import null_sample
from layerprof.history.changes import analyze
from layerprof.history.gate import judge
from layerprof.history.records import Environment, Figure, LayerPoint, RunEntry
from layerprof.history.store import HistoryStore

ENV = Environment("Big", "bench", "cpu", "2.x", "float32", ("1x512",))
BATCH = 200  # runs per transaction while building


def build(path: Path, runs: int, layers: int, seed: int) -> float:
    """Write the history; seconds it took."""
    rng = np.random.default_rng(seed)
    paths = [f"blocks.{i // 4}.{('attn', 'mlp', 'norm1', 'norm2')[i % 4]}" for i in range(layers)]
    cost = 2e7 / np.arange(1, layers + 1)  # ns: 20 ms, 10 ms, 6.7 ms, ...
    start = time.perf_counter()
    with HistoryStore(path, create=True) as store:
        for first in range(0, runs, BATCH):
            batch = []
            for i in range(first, min(first + BATCH, runs)):
                times = cost * 1.3 ** rng.uniform(-0.5, 0.5) * np.exp(rng.normal(0, 0.03, layers))
                ns = times.astype(np.int64).tolist()
                spread = (times * 0.02).astype(np.int64).tolist()
                batch.append(
                    RunEntry(
                        commit=f"{i:040x}",
                        env=ENV,
                        when_ns=i * 3_600_000_000_000,
                        branch="main",
                        figures=(Figure("latency", int(times.sum()), int(times.sum() * 0.01), 50),),
                        layers=tuple(
                            LayerPoint(p, t, t, s, s)
                            for p, t, s in zip(paths, ns, spread, strict=True)
                        ),
                    )
                )
            store.add(batch)
            print(f"  {min(first + BATCH, runs)}/{runs} runs", end="\r", file=sys.stderr)
    print(file=sys.stderr)
    return time.perf_counter() - start


def body(path: Path, action: str) -> float:
    """One show or check as the command runs it (rendering to a null console)."""
    from rich.console import Console

    from layerprof.render.console.history import print_history

    null_sample.cache_clear()  # a command draws its permutation null afresh
    start = time.perf_counter()
    with HistoryStore(path) as store:
        env = store.environments()[0].env
        view = analyze(store.window(env, 100))
    if action == "show":
        print_history(view, Console(file=io.StringIO(), width=120))
    else:
        judge(view, fail_above=5.0)
    return time.perf_counter() - start


def process(path: Path, action: str) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "layerprof", "history", action, "--db", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    return time.perf_counter() - start, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--layers", type=int, default=1_000)
    parser.add_argument("--db", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep a --db that exists: time only")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.db is not None:
        measure(args, args.db)
        return
    # without --db the history (hundreds of MB at full size) lives and dies with the run
    with tempfile.TemporaryDirectory(prefix="lp-history-") as folder:
        measure(args, Path(folder) / "history.db")


def measure(args: argparse.Namespace, path: Path) -> None:
    """Build (unless --keep finds it) and time the history at ``path``."""
    if not (args.keep and path.exists()):
        if path.exists():
            path.unlink()
        took = build(path, args.runs, args.layers, args.seed)
        print(f"built {args.runs} runs x {args.layers} layers in {took:.0f} s")
    with HistoryStore(path) as store:
        rows = store.run_count() * args.layers
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    size = os.path.getsize(path)
    print(
        f"file: {size / 1e6:.0f} MB ({size / rows:.0f} bytes per layer row)"
        f" -> {size / rows * 10_000 * 1_000 / 1e9:.2f} GB at 10,000 x 1,000"
    )
    for action in ("show", "check"):
        best = min(body(path, action) for _ in range(args.repeat))
        whole, code = process(path, action)
        print(
            f"{action}: {best * 1000:.0f} ms in-process (best of {args.repeat}),"
            f" {whole * 1000:.0f} ms as a process (exit {code})"
        )


if __name__ == "__main__":
    main()
