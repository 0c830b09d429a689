"""How long ``layerprof --help`` takes against a Python that imports only ``rich.console``.

Each round starts three fresh interpreters, interleaved so that machine noise
hits every side alike: the floor (``python -c "import rich.console"``), this
checkout's ``python -m layerprof --help``, and, with ``--baseline SRC``, the
same command from another source tree (``/work/main/src``: before and after,
one run). Prints medians and the median of each round's ratio (target: <= 1.5x).

    python benchmarks/startup.py [--repeat 15] [--baseline ../main/src]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

SRC = Path(__file__).resolve().parents[1] / "src"
FLOOR = [sys.executable, "-c", "import rich.console"]
HELP = [sys.executable, "-m", "layerprof", "--help"]


def seconds(argv: list[str], src: Path | None) -> float:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--baseline", type=Path, default=None, help="another tree's src/")
    args = parser.parse_args(argv)
    sides: dict[str, tuple[list[str], Path | None]] = {
        "floor (import rich.console)": (FLOOR, None),
        "layerprof --help": (HELP, SRC),
    }
    if args.baseline is not None:
        sides[f"layerprof --help ({args.baseline})"] = (HELP, args.baseline.resolve())
    for cmd, src in sides.values():  # warm the OS file cache
        seconds(cmd, src)
    rounds = [
        {name: seconds(cmd, src) for name, (cmd, src) in sides.items()} for _ in range(args.repeat)
    ]
    floor = next(iter(sides))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.repeat} interleaved rounds, load average {load:.1f}")
    for name in sides:
        ratio = median(r[name] / r[floor] for r in rounds)
        print(f"{name}: {median(r[name] for r in rounds) * 1e3:.0f} ms = {ratio:.2f}x the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
