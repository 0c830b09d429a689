"""What measuring a generate() costs: the clean pass (a logits processor that reads the
clock per token) and the per-layer pass (the Recorder), each against the bare
``generate()``, side by side in one process.

A GPT-2-like model built from a config (4 layers, width 256, no weights downloaded),
prompt 1x64, 32 new tokens, greedy, 1 thread. Each round times one bare generate, one
with the timing processor and one under the Recorder, in a rotating order; printed:
the median over rounds of each ratio (with the lowest and highest round), as decode
tokens/s would see it (the whole generate's time). Target (issue 35): <= 1.1x.

    python benchmarks/generate_overhead.py [--rounds 15] [--tokens 32]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import transformers

from layerprof import Recorder
from layerprof.capture.generate import _generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=1024,
                                     n_positions=256)  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    prompt = torch.randint(0, 1024, (1, 64))
    n = args.tokens

    def bare() -> None:
        _generate(model, (prompt,), {}, n, None)

    def stamped() -> None:
        _generate(model, (prompt,), {}, n, [])

    def recorded() -> None:
        with Recorder(model):
            _generate(model, (prompt,), {}, n, None)

    variants = {"bare": bare, "clean pass (timing processor)": stamped, "Recorder": recorded}
    with torch.inference_mode():
        for fn in variants.values():
            fn()
        times: dict[str, list[float]] = {k: [] for k in variants}
        names = list(variants)
        for r in range(args.rounds):
            for name in names[r % 3 :] + names[: r % 3]:
                t0 = time.perf_counter_ns()
                variants[name]()
                times[name].append(time.perf_counter_ns() - t0)
    base = times["bare"]
    print(f"GPT-2-like 4x256, prompt 64, {n} new tokens, 1 thread:"
          f" bare generate {statistics.median(base) / 1e6:.1f} ms")  # fmt: skip
    for name in names[1:]:
        ratios = [t / b for t, b in zip(times[name], base, strict=True)]
        print(f"  {name} / bare: {statistics.median(ratios):.3f}x"
              f"  (rounds {min(ratios):.3f}x - {max(ratios):.3f}x, n={len(ratios)})")  # fmt: skip


if __name__ == "__main__":
    main()
