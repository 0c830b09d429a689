"""Per-module-call overhead of layerprof's Recorder vs a bare forward and vs torch.profiler.

500 Linear(16, 16) layers, batch 1, 1 thread. Prints ratios measured side by
side in one run; target: ours <= 0.25x torch.profiler(with_stack=True)'s.

    python benchmarks/overhead.py [--layers 500] [--iters 30] [--compare-hooks]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from layerprof import Recorder


def median_forward_ns(fn: Callable[[], Any], iters: int) -> float:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples)


def global_hooks(model: nn.Module) -> list[Any]:
    """The alternative design: process-wide module hooks + a lookup of our modules."""
    paths = {id(m): p for p, m in model.named_modules()}
    stack: list[tuple[str, int]] = []
    records: list[tuple[str, int, int]] = []
    now = time.perf_counter_ns

    def pre(module: nn.Module, args: Any) -> None:
        path = paths.get(id(module))
        if path is not None:
            stack.append((path, now()))

    def post(module: nn.Module, args: Any, out: Any) -> None:
        if id(module) in paths:
            t = now()
            path, start = stack.pop()
            records.append((path, start, t))

    from torch.nn.modules import module as mod

    return [mod.register_module_forward_pre_hook(pre), mod.register_module_forward_hook(post)]


def wrapped_forwards(model: nn.Module) -> list[tuple[nn.Module, Any]]:
    """The third design: replace each module's ``forward`` with a timing wrapper.

    It skips hook dispatch but is invisible to ``__call__`` (other hooks see the
    wrapper, ``torch.compile``/TorchScript see a different function) - measured
    here for the comparison only. Returns what to restore.
    """
    records: list[tuple[str, int, int]] = []
    now = time.perf_counter_ns
    saved = []
    for path, module in model.named_modules():
        original = module.forward

        def timed(*args: Any, _f: Any = original, _p: str = path, **kwargs: Any) -> Any:
            t0 = now()
            out = _f(*args, **kwargs)
            records.append((_p, t0, now()))
            return out

        saved.append((module, original))
        module.forward = timed  # type: ignore[method-assign]
    return saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=500)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--compare-hooks", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = nn.Sequential(*(nn.Linear(16, 16) for _ in range(a.layers))).eval()
    x = torch.randn(1, 16)
    calls = a.layers + 1

    with torch.inference_mode():
        bare = median_forward_ns(lambda: model(x), a.iters)
        with Recorder(model, record_shapes=False):
            ours = median_forward_ns(lambda: model(x), a.iters)
        from torch.profiler import ProfilerActivity, profile

        def profiled() -> None:
            with profile(activities=[ProfilerActivity.CPU], with_stack=True):
                model(x)

        def empty_profiled() -> None:
            with profile(activities=[ProfilerActivity.CPU], with_stack=True):
                pass

        torch_fixed = median_forward_ns(empty_profiled, max(a.iters // 3, 5))
        torch_t = median_forward_ns(profiled, max(a.iters // 3, 5)) - torch_fixed
        glob = wrapped = None
        if a.compare_hooks:
            handles = global_hooks(model)
            try:
                glob = median_forward_ns(lambda: model(x), a.iters)
            finally:
                for h in handles:
                    h.remove()
            saved = wrapped_forwards(model)
            try:
                wrapped = median_forward_ns(lambda: model(x), a.iters)
            finally:
                for module, original in saved:
                    module.forward = original  # type: ignore[method-assign]

    ours_per = (ours - bare) / calls
    torch_per = (torch_t - bare) / calls
    print(
        f"bare forward:                  {bare / 1e6:8.3f} ms  ({a.layers} x Linear(16,16), batch 1, 1 thread)"
    )
    print(
        f"layerprof Recorder forward:    {ours / 1e6:8.3f} ms  -> {ours_per / 1e3:6.2f} us per module call, {ours / bare:5.2f}x bare"
    )
    print(f"torch.profiler(with_stack):    {torch_t / 1e6:8.3f} ms  -> {torch_per / 1e3:6.2f} us per module call, {torch_t / bare:5.2f}x bare"
          f" (profiler start/stop {torch_fixed / 1e6:.1f} ms excluded)")  # fmt: skip
    print(
        f"ratio ours/torch.profiler per-call overhead: {ours_per / torch_per:.3f}  (target <= 0.25)"
    )
    for label, value in (("global module hooks", glob), ("wrapped forward()", wrapped)):
        if value is not None:
            per = (value - bare) / calls / 1e3
            print(
                f"{label + ' variant:':30s} {value / 1e6:8.3f} ms  -> {per:6.2f} us per module call"
            )


if __name__ == "__main__":
    main()
