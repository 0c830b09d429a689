"""How fast and how lean ``layerprof.trace.analyze`` is on a real 109k-event trace.

Prints, from one run:

* our full ``analyze`` vs ``orjson.loads`` of the same file (read + gunzip +
  decode, and decode alone), best of ``--repeat`` runs each, interleaved so
  machine noise hits both alike (target: <= 2.5x);
* peak traced memory of ``analyze`` (tracemalloc) vs the decompressed JSON
  size (target: <= 3x);
* HolisticTraceAnalysis ``TraceAnalysis`` load + ``get_temporal_breakdown``
  run in ``--hta-python`` (its own environment, via a subprocess) or in this
  interpreter when importable (target: ours >= 6x faster).

    python benchmarks/analyze_speed.py [--trace PATH] [--repeat 5] [--hta-python /tmp/hta-venv/bin/python]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path

import orjson

from layerprof.trace import analyze

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared/traces/hta/negative_queue_length_values_check/rank0.json.gz"

# Run inside HTA's interpreter: time load + temporal breakdown, print seconds.
HTA_SNIPPET = """
import sys, time, logging
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
analyzer.get_temporal_breakdown(visualize=False)
print(time.perf_counter() - t0)
"""


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def plain_decode(path: Path) -> object:
    return orjson.loads(gzip.decompress(path.read_bytes()))


def peak_memory(path: Path) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        analyze(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def hta_seconds(path: Path, repeat: int, python: str | None) -> float | None:
    """Best HTA time, or None when HTA cannot run."""
    if python is None and importlib.util.find_spec("hta") is None:
        return None
    interpreter = python or sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(path, Path(tmp) / path.name)  # HTA reads a directory of traces
        best = float("inf")
        for _ in range(repeat):
            done = subprocess.run(
                [interpreter, "-c", HTA_SNIPPET, tmp],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                tail = done.stderr.strip().splitlines()[-1:] or ["?"]
                print(f"HTA failed: {tail[0]}")
                return None
            best = min(best, float(done.stdout.strip().splitlines()[-1]))
        return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--hta-python", default=None, help="python of an env with HTA")
    args = parser.parse_args(argv)
    path: Path = args.trace
    if not path.is_file():
        print(f"trace not found: {path}")
        return 1
    raw = path.read_bytes()
    json_size = len(gzip.decompress(raw)) if raw[:2] == b"\x1f\x8b" else len(raw)
    del raw

    decode = analyze_t = float("inf")
    loads_only = float("inf")
    text = gzip.decompress(path.read_bytes())
    for _ in range(args.repeat):  # interleaved: noise hits both sides alike
        decode = min(decode, best_of(1, partial(plain_decode, path)))
        loads_only = min(loads_only, best_of(1, partial(orjson.loads, text)))
        analyze_t = min(analyze_t, best_of(1, partial(analyze, path)))
    text = b""
    report = analyze(path)
    events = report.ranks[0].events
    peak = peak_memory(path)

    print(f"trace: {path.name}, {events} events, {json_size / 1e6:.1f} MB of JSON")
    print(
        f"orjson read+gunzip+loads: {decode * 1e3:.0f} ms (loads alone {loads_only * 1e3:.0f} ms)"
    )
    print(
        f"layerprof analyze: {analyze_t * 1e3:.0f} ms = {analyze_t / decode:.2f}x"
        f" read+gunzip+loads, {analyze_t / loads_only:.2f}x loads alone (target <= 2.5x)"
    )
    print(
        f"peak memory (tracemalloc): {peak / 1e6:.1f} MB = {peak / json_size:.2f}x"
        " the decompressed JSON (target <= 3x)"
    )
    hta = hta_seconds(path, max(1, min(args.repeat, 3)), args.hta_python)
    if hta is None:
        print("HTA not available")
    else:
        print(
            f"HTA TraceAnalysis load + get_temporal_breakdown: {hta * 1e3:.0f} ms;"
            f" layerprof is {hta / analyze_t:.1f}x faster (target >= 6x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
