"""Eager vs ``--compile``, layer by layer, on the 2-block transformer of compile_overhead.py.

The figures issue 18 asks for, from what a user runs: ``layerprof.profile(model, ids)``
and ``layerprof.profile(model, ids, compile=True)``, alternately first, for
``--rounds`` rounds (the first compiled round pays the compile; later ones reuse
Dynamo's and inductor's caches). Printed:

* the clean forward latency, eager / compiled (the latency passes: no hooks, no
  profiler), median of the per-round ratios;
* per layer: eager and compiled total time (medians over rounds of each round's
  median), the speedup (median of the per-round eager / compiled ratios), and the
  share of the layer's own (self) compiled time the split rule estimated (fused
  kernels spanning several layers);
* the compiled section's coverage: the share of the compiled regions' time
  attributed to module paths (target >= 85 %), how much of it was split, the
  wrapper overhead and the time outside the regions, and the compile time.

The eager per-layer times come from hooks, the compiled ones from kernel events under
torch.profiler: the speedup column is what ``layerprof diff eager.json compiled.json``
shows. A shared machine is noisy: read the ratios, not the milliseconds.

    python benchmarks/compile_figures.py [--rounds 5] [--iters 20] [--dim 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_overhead import TinyLM  # the model of the overhead figure

import layerprof
from layerprof.capture.options import CompileOptions
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import BUCKET_ROWS


def totals(profile: Profile) -> dict[str, float]:
    return {r.path: r.total_ns for r in profile.rows() if r.calls}


def median_ratio(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--split", default="cost", choices=("cost", "lca", "equal"))
    args = parser.parse_args()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))
    torch.manual_seed(0)
    model = TinyLM(args.dim).eval()
    ids = torch.randint(0, 256, (args.batch, 64))
    common = {"warmup": 2, "iters": args.iters, "threads": args.threads}
    compile_opts = CompileOptions(split=args.split)

    latency: list[float] = []
    speedups: dict[str, list[float]] = defaultdict(list)
    eager_ns: dict[str, list[float]] = defaultdict(list)
    compiled_ns: dict[str, list[float]] = defaultdict(list)
    last: Profile | None = None
    compile_s = 0.0
    for r in range(args.rounds):
        got: dict[str, Profile] = {}
        for kind in ("eager", "compiled") if r % 2 == 0 else ("compiled", "eager"):
            opts = {"compile": compile_opts} if kind == "compiled" else {}
            got[kind] = layerprof.profile(model, ids, **common, **opts)  # type: ignore[arg-type]
        eager, compiled = got["eager"], got["compiled"]
        if r == 0 and compiled.compiled is not None:
            compile_s = compiled.compiled.compile_ns / 1e9
        assert eager.latency is not None and compiled.latency is not None
        latency.append(eager.latency.median / compiled.latency.median)
        e, c = totals(eager), totals(compiled)
        for path, ns in c.items():
            compiled_ns[path].append(ns)
            if path in e:
                eager_ns[path].append(e[path])
                if ns > 0:
                    speedups[path].append(e[path] / ns)
        last = compiled
        print(f"round {r + 1}/{args.rounds}: latency eager/compiled {latency[-1]:.2f}x", flush=True)

    assert last is not None and last.compiled is not None
    section = last.compiled
    cov = section.coverage
    print()
    print(
        f"clean forward latency, eager / compiled: {median_ratio(latency)}"
        f" (median of {args.rounds} interleaved rounds x {args.iters} forwards;"
        f" threads {args.threads}; torch {torch.__version__})"
    )
    print(f"compile time (first round): {compile_s:.1f} s")
    print()
    width = max(len(p or "(root)") for p in compiled_ns)
    print(
        f"{'layer':<{width}}  {'eager ms':>9}  {'compiled ms':>11}  {'speedup':>8}  {'est. self':>9}"
    )
    for path in (r.path for r in last.rows() if r.path in compiled_ns):
        eager_ms = statistics.median(eager_ns[path]) / 1e6 if eager_ns[path] else None
        est = section.estimated_share(path) if path not in BUCKET_ROWS else 0.0
        print(
            f"{path or '(root)':<{width}}"
            f"  {f'{eager_ms:.3f}' if eager_ms is not None else '-':>9}"
            f"  {statistics.median(compiled_ns[path]) / 1e6:>11.3f}"
            f"  {median_ratio(speedups[path]):>8}"
            f"  {f'{100 * est:.0f}%' if est else '':>9}"
        )
    print()
    print(
        f"coverage (last round, per forward): forward {cov.forward_ns / 1e6:.3f} ms ="
        f" attributed {cov.attributed_ns / 1e6:.3f} + overhead {cov.overhead_ns / 1e6:.3f}"
        f" + outside {cov.outside_ns / 1e6:.3f}"
    )
    shared = cov.shared_ns / cov.attributed_ns if cov.attributed_ns else 0.0
    print(
        f"attributed share of the compiled regions: {100 * cov.attributed_share:.1f}%"
        f" (target >= 85%); split by the {section.split} rule: {100 * shared:.1f}% of it;"
        f" unmatched kernel events: {len(section.unmatched)}"
    )


if __name__ == "__main__":
    main()
