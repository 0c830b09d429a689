"""How fast and how lean ``layerprof.trace.analyze`` is on a real 109k-event trace.

Prints, from one run:

* our full ``analyze`` vs ``orjson.loads`` of the same file (read + gunzip +
  decode, and decode alone): the median over ``--repeat`` interleaved rounds
  of each round's ratio, so machine noise hits both sides alike (target:
  <= 1.3x); with ``--baseline SRC`` also another tree's ratio (before/after),
  in fresh interpreters taking turns;
* peak traced memory (tracemalloc) of reading the file alone and of the
  whole ``analyze``, vs the decompressed JSON size (targets: <= 1.3x and
  <= 2x);
* whole processes, as a user runs them, timed from outside and taking turns:
  ``layerprof analyze TRACE`` (the CLI: start-up, imports, the report on
  stdout) against the floor process (``python -c`` of read + gunzip +
  ``orjson.loads``; target <= 1.3x), with ``--baseline SRC`` against that
  tree's ``layerprof analyze`` too (the same rounds), and, where HTA runs,
  against HTA's whole process (its imports and the calls below; target: ours
  >= 6x faster);
* HolisticTraceAnalysis ``TraceAnalysis`` load + temporal breakdown + comm/comp
  overlap + kernel breakdown run in ``--hta-python`` (its own environment) or
  in this interpreter when importable, against layerprof's ``analyze``: each
  side in a fresh interpreter that imports its library and then times its
  one call (as a user runs either), the two taking turns; the median of
  the rounds' ratios (target: ours >= 6x faster).

    python benchmarks/analyze_speed.py [--trace PATH] [--repeat 5] [--hta-python /tmp/hta-venv/bin/python]
        [--baseline ../main/src]
    python benchmarks/analyze_speed.py --scale [--repeat 2] [--scale-dir /tmp] [--copies 8,40,160]

``--scale``: whole ``layerprof analyze`` processes on big_trace.py copies of 0.16,
0.82 and 3.3 GB, interleaved with the floor process where it fits in memory,
printing seconds and peak RSS (``wait4``), each per GB of JSON.

``--trace`` defaults to HTA's 26 MB ``negative_queue_length_values_check``
trace, checked in under ``tests/data/hta``; an epoch-float trace (``ns_resolution_trace``) times the exact
ns-digit path.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from statistics import median

import orjson
from big_trace import DEFAULT_TRACE, plain_text  # beside this script

from layerprof.trace import analyze

ROOT = Path(__file__).resolve().parents[1]

# Run inside HTA's interpreter: time load + the analyses layerprof's analyze also
# does (temporal breakdown, comm/comp overlap, kernel breakdown); print seconds.
HTA_SNIPPET = """
import sys, time, logging
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
analyzer.get_temporal_breakdown(visualize=False)
try:
    analyzer.get_comm_comp_overlap(visualize=False)
except Exception:  # a trace without collectives
    pass
analyzer.get_gpu_kernel_breakdown(visualize=False)
print(time.perf_counter() - t0)
"""

# The same for layerprof: import, then time the one analyze call a user makes.
OURS_SNIPPET = """
import sys, time
from layerprof.trace import analyze
t0 = time.perf_counter()
analyze(sys.argv[1])
print(time.perf_counter() - t0)
"""

# Run with another source tree first on the path (--baseline): one warm-up analyze,
# then one round of the floor and analyze; print analyze / floor.
BASELINE_SNIPPET = """
import gzip, sys, time
import orjson
from layerprof.trace import analyze
path = sys.argv[1]
analyze(path)
t0 = time.perf_counter()
raw = open(path, "rb").read()
orjson.loads(gzip.decompress(raw) if raw[:2] == b"\\x1f\\x8b" else raw)
t1 = time.perf_counter()
analyze(path)
t2 = time.perf_counter()
print((t2 - t1) / (t1 - t0))
"""


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def plain_decode(path: Path) -> object:
    raw = path.read_bytes()
    return orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def peak_memory(fn: Callable[[], object]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def read_only(path: Path) -> object:
    """Reading the file into memory, as ``analyze`` does (older trees: their reader)."""
    try:
        from layerprof.reading import read_input
    except ImportError:  # before the shared bounded reader existed
        from layerprof.trace.reader import read_bytes  # type: ignore[attr-defined]

        return read_bytes(path)
    return read_input(path)


def _timed_snippet(interpreter: str, snippet: str, arg: str, env: dict[str, str]) -> float:
    done = subprocess.run(
        [interpreter, "-c", snippet, arg], capture_output=True, text=True, check=False, env=env
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["?"]
        raise RuntimeError(tail[0])
    return float(done.stdout.strip().splitlines()[-1])


FLOOR_SNIPPET = """
import gzip, sys
import orjson
raw = open(sys.argv[1], "rb").read()
orjson.loads(gzip.decompress(raw) if raw[:2] == b"\\x1f\\x8b" else raw)
"""


def _process_seconds(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False, env=env)
    took = time.perf_counter() - start
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
        raise RuntimeError(tail[0])
    return took


def whole_processes(
    path: Path, repeat: int, python: str | None, baseline: Path | None = None
) -> dict[str, list[float]]:
    """Seconds of each whole process per round, the sides taking turns (the order
    rotates): the floor, ``layerprof analyze``, with ``baseline`` another tree's, and,
    where HTA runs, HTA's."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "layerprof", "analyze", str(path)]
    sides: dict[str, Callable[[], float]] = {
        "floor": lambda: _process_seconds([sys.executable, "-c", FLOOR_SNIPPET, str(path)], env),
        "layerprof": lambda: _process_seconds(command, env),
    }
    if baseline is not None:
        before = {**os.environ, "PYTHONPATH": str(baseline)}
        sides["baseline"] = lambda: _process_seconds(command, before)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(path, Path(tmp) / path.name)  # HTA reads a directory of traces
        if python is not None or importlib.util.find_spec("hta") is not None:
            interpreter = python or sys.executable
            sides["hta"] = lambda: _process_seconds(
                [interpreter, "-c", HTA_SNIPPET, tmp], dict(os.environ)
            )
        names = list(sides)
        out: dict[str, list[float]] = {name: [] for name in names}
        try:
            for i in range(repeat):
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    out[name].append(sides[name]())
        except RuntimeError as exc:
            print(f"a process failed: {exc}")
            out.pop("hta", None)
    return out


def hta_rounds(path: Path, repeat: int, python: str | None) -> list[tuple[float, float]] | None:
    """(HTA seconds, layerprof seconds) per round, each in a fresh interpreter, taking
    turns (who goes first alternates); None when HTA cannot run."""
    if python is None and importlib.util.find_spec("hta") is None:
        return None
    interpreter = python or sys.executable
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(path, Path(tmp) / path.name)  # HTA reads a directory of traces
        try:
            for i in range(repeat):
                sides = [
                    lambda: _timed_snippet(interpreter, HTA_SNIPPET, tmp, dict(os.environ)),
                    lambda: _timed_snippet(sys.executable, OURS_SNIPPET, str(path), env),
                ]
                order = (0, 1) if i % 2 == 0 else (1, 0)
                took = {k: sides[k]() for k in order}
                rounds.append((took[0], took[1]))
        except RuntimeError as exc:
            print(f"HTA failed: {exc}")
            return None
    return rounds


def _process_run(command: list[str], env: dict[str, str]) -> tuple[float, int]:
    """(seconds, peak resident bytes) of one whole process (``wait4``: its own rusage)."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    took = time.perf_counter() - start
    err = child.stderr.read().decode(errors="replace") if child.stderr else ""
    if child.stderr:
        child.stderr.close()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError((err.strip().splitlines()[-1:] or ["?"])[0])
    return took, usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)


#: Copies of the 26 MB trace (big_trace.py) for the --scale sizes: 0.16, 0.82, 3.3 GB.
SCALE_COPIES = (8, 40, 160)
#: The floor process needs about 9x the file (1.47 GB for 0.16 GB; 7.3 GB for 0.82 GB).
FLOOR_MEMORY_PER_BYTE = 10


def scale(folder: Path, copies: tuple[int, ...], repeat: int) -> int:
    """Whole ``layerprof analyze`` processes on big_trace.py copies of growing size, each
    round interleaved with the floor process (read + ``orjson.loads``) where the floor
    fits in memory: time and peak RSS, and both per GB of JSON. Files are made in
    ``folder`` when missing (and left there: delete them when done)."""
    from layerprof.machine import available_memory

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    print("trace | events | layerprof s | s/GB | peak RSS GB | RSS/GB | floor s | floor RSS GB"
          " | ours/floor")  # fmt: skip
    for n in copies:
        path = folder / f"big_trace_{n}.json"
        if not path.exists():
            # In a process of its own: a child's peak RSS (wait4) counts the parent's
            # high-water mark too (Linux records it at exec), and writing the copies
            # here took ours to 0.26 GB, which a 0.02 GB trace's analyze then "used".
            maker = [sys.executable, str(Path(__file__).with_name("big_trace.py")), str(path)]
            subprocess.run([*maker, "--copies", str(n)], check=True)
        gb = path.stat().st_size / 1e9
        room = available_memory() or 0
        floor_fits = room > FLOOR_MEMORY_PER_BYTE * path.stat().st_size
        commands = {"ours": [sys.executable, "-m", "layerprof", "analyze", str(path), "-q"]}
        if floor_fits:
            commands["floor"] = [sys.executable, "-c", FLOOR_SNIPPET, str(path)]
        runs: dict[str, list[tuple[float, int]]] = {name: [] for name in commands}
        names = list(commands)
        for i in range(repeat):  # taking turns, the order rotating
            for name in names[i % len(names) :] + names[: i % len(names)]:
                runs[name].append(_process_run(commands[name], env))
        ours, floor = runs["ours"], runs.get("floor", [])
        t, rss = median(o[0] for o in ours), max(o[1] for o in ours)
        line = f"{gb:.2f} GB | {n} copies | {t:.1f} | {t / gb:.1f} | {rss / 1e9:.2f} | {rss / 1e9 / gb:.2f}"
        if floor:
            ft, frss = median(f[0] for f in floor), max(f[1] for f in floor)
            ratio = median(o[0] / f[0] for o, f in zip(ours, floor, strict=True))
            line += f" | {ft:.1f} | {frss / 1e9:.2f} | {ratio:.2f}x"
        else:
            line += f" | (needs ~{FLOOR_MEMORY_PER_BYTE * gb:.0f} GB, {room / 1e9:.0f} GB free) | |"
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(line + f"   ({repeat} rounds, load {load:.1f})", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--hta-python", default=None, help="python of an env with HTA")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another tree's src/ (before a change): both trees' ratio to the floor,"
        " measured in interleaved fresh interpreters",
    )
    parser.add_argument(
        "--uncompressed", action="store_true", help="measure a gunzipped copy of the trace"
    )
    parser.add_argument(
        "--no-memory",
        action="store_true",
        help="skip the peak-memory figures (tracemalloc is slow on a big trace: big_trace.py)",
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="time whole processes on big_trace.py copies (0.16, 0.82, 3.3 GB; made in"
        " --scale-dir when missing) against the floor process where it fits in memory:"
        " seconds and peak RSS, per GB",
    )
    parser.add_argument("--scale-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument(
        "--copies", default=",".join(map(str, SCALE_COPIES)), help="--scale's sizes, in copies"
    )
    args = parser.parse_args(argv)
    if args.scale:
        copies = tuple(int(c) for c in args.copies.split(","))
        return scale(args.scale_dir, copies, args.repeat)
    path: Path = args.trace
    if not path.is_file():
        print(f"trace not found: {path}")
        return 1
    if args.uncompressed:
        with tempfile.TemporaryDirectory() as tmp:
            plain = Path(tmp) / path.name.removesuffix(".gz")
            plain.write_bytes(plain_text(path))
            return measure(plain, args)
    return measure(path, args)


def measure(path: Path, args: argparse.Namespace) -> int:
    json_size = len(plain_text(path))

    text = plain_text(path)
    rounds: list[tuple[float, float, float]] = []
    for _ in range(args.repeat):  # interleaved: noise hits every side alike
        rounds.append(
            (
                seconds(lambda: plain_decode(path)),
                seconds(lambda: orjson.loads(text)),
                seconds(lambda: analyze(path)),
            )
        )
    text = b""
    decode = median(r[0] for r in rounds)
    loads_only = median(r[1] for r in rounds)
    analyze_t = median(r[2] for r in rounds)
    vs_decode = median(r[2] / r[0] for r in rounds)
    vs_loads = median(r[2] / r[1] for r in rounds)
    report = analyze(path)
    source = report.ranks[0].trace.source
    events = source.events if source is not None else "?"
    read_peak = 0 if args.no_memory else peak_memory(lambda: read_only(path))
    peak = 0 if args.no_memory else peak_memory(lambda: analyze(path))

    print(f"trace: {path.name}, {events} events, {json_size / 1e6:.1f} MB of JSON")
    print(
        f"orjson read+gunzip+loads: {decode * 1e3:.0f} ms (loads alone {loads_only * 1e3:.0f} ms),"
        f" medians of {args.repeat} rounds"
    )
    print(
        f"layerprof analyze: {analyze_t * 1e3:.0f} ms = {vs_decode:.2f}x"
        f" read+gunzip+loads, {vs_loads:.2f}x loads alone (median ratio; target <= 1.3x)"
    )
    if not args.no_memory:
        print(
            f"peak memory (tracemalloc): reading {read_peak / 1e6:.1f} MB ="
            f" {read_peak / json_size:.2f}x the decompressed JSON (target <= 1.3x);"
            f" analyze {peak / 1e6:.1f} MB = {peak / json_size:.2f}x (target <= 2x)"
        )
    if args.baseline is not None:
        before, after = baseline_ratios(path, args.baseline, args.repeat)
        print(
            f"analyze / read+gunzip+loads, fresh interpreters, interleaved: {before:.2f}x"
            f" ({args.baseline}) -> {after:.2f}x (this tree); medians of {args.repeat} rounds"
        )
    whole = whole_processes(path, max(3, args.repeat), args.hta_python, args.baseline)
    ours = whole["layerprof"]
    if "baseline" in whole:
        print(
            f"whole processes, {args.baseline}: layerprof analyze"
            f" {median(whole['baseline']) * 1e3:.0f} ms ="
            f" {median(b / f for b, f in zip(whole['baseline'], whole['floor'], strict=True)):.2f}x"
            f" the floor process; this tree / that one:"
            f" {median(o / b for o, b in zip(ours, whole['baseline'], strict=True)):.3f}"
            " (median ratio of the same rounds)"
        )
    print(
        f"whole processes: layerprof analyze {median(ours) * 1e3:.0f} ms ="
        f" {median(o / f for o, f in zip(ours, whole['floor'], strict=True)):.2f}x the floor"
        f" process ({median(whole['floor']) * 1e3:.0f} ms; median ratio of {len(ours)}"
        " interleaved rounds; target <= 1.3x)"
        + (
            f"; HTA's process {median(whole['hta']) * 1e3:.0f} ms, layerprof"
            f" {median(h / o for h, o in zip(whole['hta'], ours, strict=True)):.1f}x faster"
            " (target >= 6x)"
            if "hta" in whole
            else ""
        )
    )
    hta = hta_rounds(path, max(3, args.repeat), args.hta_python)
    if hta is None:
        print("HTA not available")
    else:
        print(
            f"HTA TraceAnalysis load + temporal breakdown + comm/comp overlap + kernel"
            f" breakdown: {median(h for h, _ in hta) * 1e3:.0f} ms vs layerprof analyze"
            f" {median(o for _, o in hta) * 1e3:.0f} ms, each one call in a fresh interpreter"
            f" (medians of {len(hta)} interleaved rounds); layerprof is"
            f" {median(h / o for h, o in hta):.1f}x faster (median ratio; target >= 6x)"
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average at the end: {load:.1f}")
    return 0


def baseline_ratios(path: Path, baseline: Path, repeat: int) -> tuple[float, float]:
    """Median analyze/floor ratio of ``baseline`` and of this tree, one fresh
    interpreter per tree and round, the trees alternating."""
    this = str(ROOT / "src")
    ratios: dict[str, list[float]] = {str(baseline): [], this: []}
    for _ in range(repeat):
        for src, got in ratios.items():
            env = {**os.environ, "PYTHONPATH": src}
            done = subprocess.run(
                [sys.executable, "-c", BASELINE_SNIPPET, str(path)],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            got.append(float(done.stdout.split()[-1]))
    return median(ratios[str(baseline)]), median(ratios[this])


if __name__ == "__main__":
    sys.exit(main())
