"""Rendering cost of long names and notes (issue 27 item 13): ``report`` of a saved
profile whose note and one layer path are megabytes long.

Builds a small saved profile with torch, then writes copies with a note of
``--note`` MB (two-character lines) and a layer path of ``--path`` MB, at one
and at ``--scale`` times those sizes. Each round runs ``layerprof report`` (the
console) and ``layerprof report --html`` on both, interleaved, in fresh
processes; prints the median wall time and peak memory per case and the
large/small ratio, which should stay near ``--scale`` (linear) or below (the
text is cut at ``MAX_SHOWN``). Run on a quiet machine.

    python benchmarks/long_names.py [--note 4] [--path 10] [--scale 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from layerprof.capture.options import RunOptions
from layerprof.capture.runner import run_model


def saved(directory: Path) -> dict[str, object]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    profile = run_model(model, (torch.randn(2, 4),), {}, RunOptions(warmup=1, iters=3))
    doc: dict[str, object] = json.loads(profile.save(directory / "base.json").read_text())
    return doc


def with_long_text(doc: dict[str, object], note_mb: float, path_mb: float, out: Path) -> Path:
    copy = json.loads(json.dumps(doc))
    layers = copy["layers"]
    layers[-1]["path"] = "L" * int(path_mb * 1e6)
    copy["notes"] = ["n\n" * int(note_mb * 1e6 / 2)]
    out.write_text(json.dumps(copy))
    return out


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MB of one ``layerprof`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "layerprof", *argv], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024  # ru_maxrss: the largest child so far


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--note", type=float, default=4.0, help="note size in MB")
    parser.add_argument("--path", type=float, default=10.0, help="layer path size in MB")
    parser.add_argument("--scale", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        doc = saved(directory)
        files = {
            "small": with_long_text(doc, args.note, args.path, directory / "small.json"),
            "large": with_long_text(
                doc, args.note * args.scale, args.path * args.scale, directory / "large.json"
            ),
        }
        cases = {
            f"{size} {what}": argv
            for size, path in files.items()
            for what, argv in (
                ("console", ["report", str(path)]),
                ("html", ["report", str(path), "--html", str(directory / "r.html"), "-q"]),
            )
        }
        walls: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, argv in cases.items():  # interleaved: load drifts hit every case
                walls[name].append(timed(argv)[0])
        print(f"note {args.note} MB, path {args.path} MB, scale {args.scale}x")
        for name, values in walls.items():
            print(f"  {name:14} median {statistics.median(values):7.2f} s  runs {values}")
        for what in ("console", "html"):
            ratio = statistics.median(walls[f"large {what}"]) / statistics.median(
                walls[f"small {what}"]
            )
            print(f"  {what}: large/small {ratio:.2f} (linear would be {args.scale:g})")
        # peak memory: the largest process of the run (ru_maxrss of children)
        print(f"  peak resident memory of any case {timed(cases['large html'])[1]:.0f} MB")


if __name__ == "__main__":
    main()
