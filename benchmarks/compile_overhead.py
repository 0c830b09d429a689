"""What ``--compile``'s flags cost a compiled model when the profiler is off.

``layerprof run --compile`` compiles through its recording backend: inductor
with provenance tracking and C++ kernel profiling on (each generated kernel
then checks whether a profiler is recording), the AOTAutograd cache off, and
a ``layer:`` range around the compiled call. Its latency pass times that
program, so it should run as fast as the plain ``torch.compile(model)``.

Same weights, same input; one copy compiled plainly, one the way ``--compile``
does. Rounds alternate which goes first; each round takes the median of
``--iters`` forwards of each. Prints the median over rounds of the per-round
ratio (target: <= 1.03). Timings on a shared machine are noisy: read the ratio,
not the milliseconds.

    python benchmarks/compile_overhead.py [--rounds 15] [--iters 30] [--dim 128]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from layerprof.capture.compiled.run import CompiledRun
from layerprof.capture.options import CompileOptions


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    """Embeddings, two pre-norm transformer blocks, a final norm and an LM head."""

    def __init__(self, dim: int, vocab: int = 256, length: int = 64) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(length, dim)
        self.blocks = nn.ModuleList(Block(dim, 4) for _ in range(2))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def median_ns(fn: Callable[[], Any], iters: int) -> float:
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = TinyLM(args.dim).eval()
    flagged = copy.deepcopy(model)
    ids = torch.randint(0, 256, (args.batch, 64))
    plain = torch.compile(model)
    with torch.inference_mode(), CompiledRun(flagged, (ids,), {}, CompileOptions()) as run:
        print("compiling both ...", flush=True)
        for _ in range(3):
            plain(ids)
            run.forward()
        fns = {"plain": lambda: plain(ids), "flags": run.forward}
        ratios, times = [], {"plain": [], "flags": []}
        for r in range(args.rounds):
            order = ("plain", "flags") if r % 2 == 0 else ("flags", "plain")
            got = {name: median_ns(fns[name], args.iters) for name in order}
            for name, ns in got.items():
                times[name].append(ns)
            ratios.append(got["flags"] / got["plain"])
    ratio = statistics.median(ratios)
    print(
        f"--compile flags / plain torch.compile, profiler off: {ratio:.3f}x"
        f" (median of {args.rounds} interleaved rounds x {args.iters} forwards;"
        f" plain {statistics.median(times['plain']) / 1e6:.3f} ms,"
        f" flags {statistics.median(times['flags']) / 1e6:.3f} ms; threads {args.threads})"
    )
    print(f"per-round ratios: min {min(ratios):.3f}, max {max(ratios):.3f}")


if __name__ == "__main__":
    main()
