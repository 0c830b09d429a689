"""How close a generate's per-layer, per-phase times come to a known cost.

A GPT-2-like model built from a config (2 layers, width 64, no weights downloaded),
whose first block's MLP is wrapped in a layer that busy-waits a known time before
running it: ``--prefill-ms`` on the prompt, ``--decode-ms`` on one new token. Each
round runs ``layerprof.profile(model, prompt, generate=N)`` and reads the wrapper's
self time per forward in each phase (its inner MLP is a child, outside its self
time); printed per phase: the median over rounds of (measured - known) / known,
with the lowest and highest round. Target (issue 35): within 5 %.

    python benchmarks/generate_accuracy.py [--rounds 5] [--tokens 16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import transformers
from torch import nn

import layerprof


class BusyWait(nn.Module):
    """Spins a known time (``prefill_s`` on the prompt, ``decode_s`` on one token)."""

    def __init__(self, inner: nn.Module, prefill_s: float, decode_s: float) -> None:
        super().__init__()
        self.inner, self.prefill_s, self.decode_s = inner, prefill_s, decode_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        until = time.perf_counter() + (self.prefill_s if x.shape[1] > 1 else self.decode_s)
        while time.perf_counter() < until:
            pass
        out: torch.Tensor = self.inner(x)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--prefill-ms", type=float, default=3.0)
    ap.add_argument("--decode-ms", type=float, default=1.0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=256
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    block = model.transformer.h[0]
    block.mlp = BusyWait(block.mlp, a.prefill_ms / 1e3, a.decode_ms / 1e3)
    prompt = torch.randint(0, 128, (1, 32))
    errors: dict[str, list[float]] = {"prefill": [], "decode": []}
    known = {"prefill": a.prefill_ms * 1e6, "decode": a.decode_ms * 1e6}
    for _ in range(a.rounds):
        prof = layerprof.profile(model, prompt, generate=a.tokens, warmup=1, iters=2)
        g = prof.generation
        assert g is not None
        for name in errors:
            phase = g.phase(name)
            row = phase.layer("transformer.h.0.mlp") if phase is not None else None
            assert row is not None, name
            errors[name].append((row.self_ns - known[name]) / known[name])
    print(
        f"generate_accuracy: GPT-2-like 2x64, prompt 32, {a.tokens} new tokens, 1 thread;"
        f" a layer busy-waiting {a.prefill_ms} ms on the prompt and {a.decode_ms} ms per token"
    )
    for name, found in errors.items():
        print(
            f"  {name}: self time vs the known cost {100 * statistics.median(found):+.1f} %"
            f" (rounds {100 * min(found):+.1f} % to {100 * max(found):+.1f} %, n={len(found)})"
        )
    print("  target: within 5 %")


if __name__ == "__main__":
    main()
