"""Does the regression gate fail on unchanged code? Does it catch a 10 % slower layer?

Issue 22, item 1: six back-to-back single runs of one BERT, diffed pairwise at
``--fail-above 5%``, failed 3 of 5 times, because the machine drifts 10-40 %
between processes and a within-run test cannot see that. This script runs the
interleaved A/B mode (``layerprof diff --run BASE NEW --rounds R``) end to end:

* ``--pairs`` identical comparisons (the same model on both sides): every gate
  failure is a false alarm; target 0 of 20;
* one comparison where the FFN input projection of encoder layer 0 of the new side
  takes ``--slow`` (10 %) longer: it spins for that fraction of the time its own work
  took, so the slowdown is exact whatever the load; target: the gate fails, naming
  that layer.

The model is a small BERT-like encoder written here (no transformers package):
embeddings, ``--layers`` blocks of self-attention and feed-forward, hidden 256.

    python benchmarks/gate_false_alarms.py                      # 20 pairs, 10 rounds each
    python benchmarks/gate_false_alarms.py --pairs 3 --rounds 4 # a quick look

Each process imports torch, so a pair costs 2 x rounds process starts; run it on
a quiet machine for figures (the script prints what it measured, nothing is
asserted).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
SLOWED = "encoder.0.ffn.up"


class SlowLinear(nn.Linear):
    """A Linear that, when ``slow > 0``, spins for ``slow`` times its own work's time."""

    def __init__(self, n_in: int, n_out: int, slow: float = 0.0) -> None:
        super().__init__(n_in, n_out)
        self.slow = slow

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter_ns()
        out = super().forward(x)
        if self.slow > 0:
            until = start + (time.perf_counter_ns() - start) * (1 + self.slow)
            while time.perf_counter_ns() < until:
                pass
        return out


class FFN(nn.Module):
    def __init__(self, hidden: int, slow: float) -> None:
        super().__init__()
        self.up = SlowLinear(hidden, 4 * hidden, slow)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down(self.act(self.up(x)))
        return out


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, slow: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.ffn = FFN(hidden, slow)
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, h // self.heads).unbind(2)
        att = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q, k) / (h // self.heads) ** 0.5, -1)
        ctx = torch.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, h)
        x = self.norm1(x + self.out(ctx))
        out: torch.Tensor = self.norm2(x + self.ffn(x))
        return out


class Bert(nn.Module):
    """A small BERT-like encoder; ``slow`` slows encoder.0.ffn.up down by that fraction."""

    def __init__(self, layers: int = 4, hidden: int = 256, slow: float = 0.0) -> None:
        super().__init__()
        self.embed = nn.Embedding(30_000, hidden)
        self.encoder = nn.ModuleList(
            Block(hidden, 4, slow if i == 0 else 0.0) for i in range(layers)
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.encoder:
            x = block(x)
        return x


def spec(args: argparse.Namespace, slow: float) -> str:
    kwargs = json.dumps({"layers": args.layers, "slow": slow}).replace(" ", "")
    return (
        f"--arch benchmarks.gate_false_alarms:Bert --arch-kwargs {shlex.quote(kwargs)}"
        f" --input '1x128:int64[0,30000)' --warmup 3 --iters {args.iters} --threads 1"
    )


def compare(args: argparse.Namespace, new_slow: float, out: Path) -> tuple[int, dict]:
    command = [
        sys.executable, "-m", "layerprof", "diff", "--run",
        spec(args, 0.0), spec(args, new_slow), "--rounds", str(args.rounds),
        "--fail-above", args.fail_above, "-q", "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        sys.exit(f"layerprof diff failed ({done.returncode}):\n{done.stderr}")
    return done.returncode, json.loads(out.read_text())


def row_line(doc: dict, path: str | None) -> str:
    row = doc["latency"] if path is None else next(r for r in doc["layers"] if r["path"] == path)
    p = row["p_value"]
    return (
        f"{row['base_ms']:.4f} -> {row['new_ms']:.4f} ms ({row['delta_pct']:+.1f} %,"
        f" p={p:.2g}, {row['status']}, basis {row['basis']})"
        if p is not None
        else f"{row['delta_pct']:+.1f} % ({row['status']}, basis {row['basis']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20, help="identical comparisons (20)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds per comparison (10)")
    parser.add_argument("--iters", type=int, default=30, help="timed forwards per process (30)")
    parser.add_argument("--layers", type=int, default=4, help="encoder blocks (4)")
    parser.add_argument("--slow", type=float, default=0.10, help="slowdown of the layer (0.10)")
    parser.add_argument("--fail-above", default="5%", help="the gate (5%%)")
    args = parser.parse_args()
    started = time.monotonic()
    false_alarms = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            code, doc = compare(args, 0.0, Path(tmp) / f"same{i}.json")
            false_alarms += code == 1
            reasons = "; ".join(doc["gate"]["reasons"]) or "pass"
            print(
                f"identical pair {i + 1:2d}: exit {code}  latency {row_line(doc, None)}  {reasons}"
            )
        code, doc = compare(args, args.slow, Path(tmp) / "slowed.json")
    print(f"\nfalse failures: {false_alarms} of {args.pairs} identical pairs"
          f" at --fail-above {args.fail_above} ({args.rounds} rounds each)")  # fmt: skip
    caught = code == 1 and any(SLOWED in r for r in doc["gate"]["reasons"])
    print(f"{args.slow:.0%} slower {SLOWED}: exit {code}, {'caught' if caught else 'MISSED'};"
          f" row {row_line(doc, SLOWED)}")  # fmt: skip
    print(f"gate reasons: {'; '.join(doc['gate']['reasons']) or 'none'}")
    print(f"({time.monotonic() - started:.0f} s; timings on a loaded machine are not figures)")


if __name__ == "__main__":
    main()
