"""Accuracy against known truth: layers that busy-wait known times.

Tree: root (own 0.5 ms) -> [enc (own 0.2 ms) -> [a 2 ms, b 1 ms called twice], head 1.5 ms].
Every layer's total and self must be within 2 % of the truth, and the latency
within 2 % of the sum. Prints one line per layer and the worst error.

The truth of a layer is its spin time plus, for each module it calls, the
measured cost of calling an empty module without hooks (``call_us`` below):
in an un-instrumented run that Python call overhead is spent in the caller.

    python benchmarks/accuracy.py [--iters 20] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import layerprof


def spin(ms: float) -> None:
    end = time.perf_counter_ns() + int(ms * 1e6)
    while time.perf_counter_ns() < end:
        pass


class Spin(nn.Module):
    def __init__(self, ms: float) -> None:
        super().__init__()
        self.ms = ms

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spin(self.ms)
        return x


class Enc(nn.Module):
    def __init__(self, s: float) -> None:
        super().__init__()
        self.own = 0.2 * s
        self.a = Spin(2.0 * s)
        self.b = Spin(1.0 * s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spin(self.own)
        return self.b(self.a(self.b(x)))


class Root(nn.Module):
    def __init__(self, s: float) -> None:
        super().__init__()
        self.own = 0.5 * s
        self.enc = Enc(s)
        self.head = Spin(1.5 * s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spin(self.own)
        return self.head(self.enc(x))


def module_call_ms(n: int = 20000) -> float:
    """Median cost of calling an empty module (no hooks), in ms."""
    empty = Spin(0.0)
    empty.forward = lambda x: x  # type: ignore[method-assign]
    x = torch.zeros(1)
    samples = []
    with torch.inference_mode():
        for _ in range(20):
            t0 = time.perf_counter_ns()
            for _ in range(n // 20):
                empty(x)
            samples.append((time.perf_counter_ns() - t0) / (n // 20))
    samples.sort()
    return samples[len(samples) // 2] / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args()
    s = a.scale
    u = module_call_ms()
    truth = {  # path: (total ms, self ms); enc calls 3 modules, root 2, the runner calls root
        "enc.a": (2.0 * s, 2.0 * s),
        "enc.b": (2.0 * s, 2.0 * s),
        "enc": (4.2 * s + 3 * u, 0.2 * s + 3 * u),
        "head": (1.5 * s, 1.5 * s),
        "": (6.2 * s + 5 * u, 0.5 * s + 2 * u),
    }
    print(f"module call cost without hooks: {u * 1e3:.2f} us per call")
    prof = layerprof.profile(Root(s), torch.zeros(1), warmup=2, iters=a.iters)
    worst = 0.0
    for path, (t_total, t_self) in truth.items():
        row = prof.row(path)
        e_total = abs(row.total_ns / 1e6 - t_total) / t_total
        e_self = abs(row.self_ns / 1e6 - t_self) / t_self
        worst = max(worst, e_total, e_self)
        print(
            f"{path or '(root)':8s} total {row.total_ns / 1e6:7.3f} ms (truth {t_total:.3f}, err {100 * e_total:5.2f} %)"
            f"  self {row.self_ns / 1e6:7.3f} ms (truth {t_self:.3f}, err {100 * e_self:5.2f} %)"
        )
    lat = prof.latency
    assert lat is not None
    t_lat = 6.2 * s + 6 * u
    e_lat = abs(lat.median / 1e6 - t_lat) / t_lat
    worst = max(worst, e_lat)
    print(f"latency median {lat.median / 1e6:.3f} ms (truth {t_lat:.3f}, err {100 * e_lat:.2f} %)")
    print(f"worst error {100 * worst:.2f} % (target <= 2 %)")


if __name__ == "__main__":
    main()
