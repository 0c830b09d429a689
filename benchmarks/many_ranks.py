"""Many ranks: ``analyze`` of a simulated N-rank directory with each executor.

The directory holds N copies of one real trace with rewritten rank ids and
jittered timestamps (``tests/rank_traces.py``). Prints, per executor
(``serial``, ``processes``, ``dask``): the wall time of the whole analysis
against one rank analyzed in this process times N (median over ``--repeat``
interleaved rounds of each round's ratio, so machine noise hits every side
alike), and the client's peak traced memory (tracemalloc: Python and numpy
allocations of this process) against one rank's; for ``processes`` also the
largest worker's peak RSS. Then the size of one rank's pickled Profile (what
crosses a process boundary) and a paper estimate for 1024 ranks:
per-rank cost x ranks / workers + merge.

    python benchmarks/many_ranks.py [--trace PATH] [--ranks 64] [--repeat 3]
        [--executors serial,processes,dask] [--workers N]

``--trace`` defaults to HTA's 26 MB ``negative_queue_length_values_check``
trace in ``../shared`` when present, else a CPU trace made with torch here.
Absolute seconds on a shared 2-core machine mean little: read the ratios.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support.rank_traces

from tests.support.rank_traces import cpu_trace, simulate_ranks  # noqa: E402

from layerprof.trace import analyze  # noqa: E402
from layerprof.trace.distributed.ranks import merge  # noqa: E402
from layerprof.trace.jobs.executors import DaskExecutor  # noqa: E402
from layerprof.trace.jobs.processpool import ProcessExecutor  # noqa: E402
from layerprof.trace.jobs.rankjobs import RankJob  # noqa: E402
from layerprof.trace.jobs.remote import TraceInput  # noqa: E402
from layerprof.trace.jobs.tasks import cores  # noqa: E402

SHARED = [
    ROOT.parent / "shared" / "traces" / "hta",
    ROOT.parent.parent / "shared" / "traces" / "hta",
]
DEFAULT = "negative_queue_length_values_check/rank0.json.gz"


def default_trace(work: Path) -> Path:
    for base in SHARED:
        if (base / DEFAULT).is_file():
            return base / DEFAULT
    print("no shared HTA trace: making a CPU trace with torch", file=sys.stderr)
    return cpu_trace(work / "cpu.json", steps=20)


def timed(fn: Callable[[], Any], *, memory: bool = False) -> tuple[float, int, Any]:
    """Seconds of ``fn()``, and with ``memory`` its peak traced bytes (tracemalloc, this
    process; it slows Python down, so timed rounds run without it)."""
    gc.collect()
    if memory:
        tracemalloc.start()
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] if memory else 0
    if memory:
        tracemalloc.stop()
    return seconds, peak, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--executors", default="serial,processes,dask")
    ap.add_argument("--workers", type=int, default=None, help="default: one per core")
    ap.add_argument("--no-memory", action="store_true", help="skip the traced-memory pass")
    args = ap.parse_args()
    workers = args.workers or cores()
    with tempfile.TemporaryDirectory(prefix="layerprof-ranks-") as tmp:
        work = Path(tmp)
        source = args.trace or default_trace(work)
        t0 = time.perf_counter()
        files = simulate_ranks(source, work / "ranks", args.ranks)
        print(
            f"{args.ranks} ranks from {source.name} in {time.perf_counter() - t0:.1f} s;"
            f" {workers} workers on {cores()} cores"
        )
        one = TraceInput(str(files[0]), str(files[0]))
        makers: dict[str, Callable[[], Any]] = {
            "serial": lambda: "serial",
            "processes": lambda: ProcessExecutor(workers),
            "dask": lambda: DaskExecutor(workers=workers),
        }
        chosen = [e for e in args.executors.split(",") if e]
        ratios: dict[str, list[float]] = {e: [] for e in chosen}
        one_times = []
        for round_ in range(args.repeat):
            one_s, _, result = timed(lambda: RankJob()(one))
            one_times.append(one_s)
            for name in chosen:
                seconds, _, run = timed(
                    lambda n=name: analyze(work / "ranks", executor=makers[n]())
                )
                assert len(run.ranks) == args.ranks
                ratios[name].append(seconds / (one_s * args.ranks))
                print(
                    f"  round {round_ + 1} {name:9}: {seconds:6.1f} s"
                    f" ({ratios[name][-1]:.2f}x one rank x {args.ranks})"
                )
        one_s = median(one_times)
        _, peak1, _ = timed(lambda: RankJob()(one), memory=not args.no_memory)
        peak1 = max(peak1, 1)
        mems = {name: 0 for name in chosen}
        for name in chosen if not args.no_memory else ():
            _, peak, _ = timed(
                lambda n=name: analyze(work / "ranks", executor=makers[n]()), memory=True
            )
            mems[name] = peak
        profile_bytes = len(pickle.dumps(result))
        merge_s, _, _ = timed(lambda: merge("m", [result.profile] * args.ranks))
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        json_bytes = _json_size(files[0])
        print(f"\none rank: {one_s:.2f} s, peak {peak1 / 2**20:.1f} MiB traced")
        for name in chosen:
            print(
                f"{name:9}: wall {median(ratios[name]):.2f}x one rank x {args.ranks};"
                f" client peak {mems[name] / 2**20:.1f} MiB = {mems[name] / peak1:.2f}x one rank's"
            )
        print(f"largest worker process peak RSS: {children / 2**20:.0f} MiB")
        print(
            f"one rank's Profile pickles to {profile_bytes / 1e3:.0f} kB"
            f" ({profile_bytes / json_bytes:.2%} of its {json_bytes / 1e6:.1f} MB of JSON);"
            f" merging {args.ranks} ranks takes {merge_s:.2f} s"
        )
        n = 1024
        merge_n = merge_s * n / args.ranks
        print(
            f"paper estimate, {n} ranks on {workers} workers: {one_s:.2f} s x {n} / {workers}"
            f" + merge {merge_n:.1f} s = {one_s * n / workers + merge_n:.0f} s;"
            f" client holds {profile_bytes * n / 2**20:.0f} MiB of Profiles"
        )


def _json_size(path: Path) -> int:
    from layerprof.reading import read_input

    return len(read_input(path))


if __name__ == "__main__":
    main()
