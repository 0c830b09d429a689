"""What recording costs: a hooked forward against a bare one, side by side.

500 Linear(16, 16) layers, batch 1, 1 thread. Each round times ``--iters``
forwards of every variant in turn (bare first, then each instrumented one,
then bare again), so all variants see the same machine load; the printed
ratio of a variant is the median over rounds of (its median forward / the
round's median bare forward), with the lowest and highest round beside it as
the noise. The same ratio of thread CPU time is printed beside it: on a
shared machine it does not count the time other processes held the core, so
it is the steadier of the two. Target: the default ``Recorder`` and
``layerprof run``'s hooked pass <= 1.2x bare.

Variants:

* ``Recorder()`` - the default Recorder (shapes recorded on the first forward
  of each input signature; the forward timed here is a later one);
* ``run pass`` - the Recorder exactly as ``layerprof run`` uses it (no shapes);
* ``--compare``: the designs this repo measured against each other: per-module
  ``__call__`` hooks (the Recorder's design before the forward wrappers),
  process-wide module hooks, and ``torch.profiler(with_stack=True)``.

    python benchmarks/overhead.py [--layers 500] [--iters 20] [--rounds 9] [--compare]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch
from torch import nn

from layerprof import Recorder
from layerprof.capture.platform.clocks import HostClock


def median_forward_ns(fn: Callable[[], Any], iters: int) -> tuple[float, float]:
    """Median (wall, thread CPU) time of one call of ``fn``."""
    wall, cpu = [], []
    for _ in range(iters):
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        fn()
        wall.append(time.perf_counter_ns() - t0)
        cpu.append(time.thread_time_ns() - c0)
    return statistics.median(wall), statistics.median(cpu)


@contextmanager
def module_hooks(model: nn.Module) -> Iterator[None]:
    """The Recorder's former design: a forward pre-hook and a forward hook per module."""
    now = time.perf_counter_ns
    stack: list[int] = []
    records: list[tuple[str, int, int]] = []
    handles = []
    for path, module in model.named_modules():

        def pre(m: nn.Module, a: Any) -> None:
            stack.append(now())

        def post(m: nn.Module, a: Any, out: Any, _p: str = path) -> None:
            t = now()
            records.append((_p, stack.pop(), t))

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def global_hooks(model: nn.Module) -> Iterator[None]:
    """Process-wide module hooks + a lookup of our modules."""
    from torch.nn.modules import module as mod

    paths = {id(m): p for p, m in model.named_modules()}
    stack: list[int] = []
    records: list[tuple[str, int, int]] = []
    now = time.perf_counter_ns

    def pre(module: nn.Module, args: Any) -> None:
        if id(module) in paths:
            stack.append(now())

    def post(module: nn.Module, args: Any, out: Any) -> None:
        if id(module) in paths:
            t = now()
            records.append((paths[id(module)], stack.pop(), t))

    handles = [mod.register_module_forward_pre_hook(pre), mod.register_module_forward_hook(post)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def recorder(model: nn.Module, **kw: Any) -> Callable[[], AbstractContextManager[Any]]:
    return lambda: Recorder(model, **kw)


@contextmanager
def run_pass(model: nn.Module, iters: int) -> Iterator[Recorder]:
    """The Recorder as ``layerprof run``'s hooked pass uses it: no shapes, summed as it
    records (its correction is decided at once; none here, as with --no-correct)."""
    with Recorder(model, clock=HostClock(), record_shapes=False) as rec:
        rec.stream(iters + 1, correct=False)
        yield rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=500)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--compare", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = nn.Sequential(*(nn.Linear(16, 16) for _ in range(a.layers))).eval()
    x = torch.randn(1, 16)

    def forward() -> None:
        model(x)

    variants: dict[str, Callable[[], AbstractContextManager[Any]]] = {
        "Recorder() (default)": recorder(model),
        "run pass (no shapes)": lambda: run_pass(model, a.iters),
    }
    if a.compare:
        variants["module __call__ hooks"] = lambda: module_hooks(model)
        variants["process-wide hooks"] = lambda: global_hooks(model)
    ratios: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    bare_ns: list[float] = []
    with torch.inference_mode():
        for _ in range(3):
            forward()
        for _ in range(a.rounds):
            bare = [median_forward_ns(forward, a.iters)]
            times = {}
            for name, make in variants.items():
                with make():
                    forward()  # shapes (default Recorder), first-call costs
                    times[name] = median_forward_ns(forward, a.iters)
            bare.append(median_forward_ns(forward, a.iters))
            wall = statistics.mean(b[0] for b in bare)
            cpu = statistics.mean(b[1] for b in bare)
            bare_ns.append(wall)
            for name, (t_wall, t_cpu) in times.items():
                ratios[name].append((t_wall / wall, t_cpu / cpu))
        torch_ratio = profiler_ratio(model, x, a) if a.compare else None
    calls = a.layers + 1
    base = statistics.median(bare_ns)
    print(
        f"overhead: {a.layers} x Linear(16,16), batch 1, 1 thread; {a.rounds} interleaved rounds"
        f" of {a.iters} forwards; bare forward median {base / 1e6:.2f} ms"
        f" (rounds {min(bare_ns) / 1e6:.2f}-{max(bare_ns) / 1e6:.2f} ms)"
    )
    print(
        "  variant                  wall time / bare (rounds)      thread CPU time / bare (rounds)"
    )
    for name, r in ratios.items():
        wall_r = [v[0] for v in r]
        cpu_r = [v[1] for v in r]
        med = statistics.median(wall_r)
        per_call = (med - 1) * base / calls / 1e3
        print(
            f"  {name:24s} {med:5.2f}x ({min(wall_r):.2f}-{max(wall_r):.2f})"
            f" {per_call:5.2f} us/call    {statistics.median(cpu_r):5.2f}x"
            f" ({min(cpu_r):.2f}-{max(cpu_r):.2f})"
        )
    if torch_ratio is not None:
        print(f"  {'torch.profiler(stack)':24s} {torch_ratio:5.2f}x bare  (start/stop excluded)")
    print("target: default Recorder and run pass <= 1.20x bare")


def profiler_ratio(model: nn.Module, x: torch.Tensor, a: argparse.Namespace) -> float:
    """torch.profiler(with_stack=True) around one forward, its start/stop cost removed."""
    from torch.profiler import ProfilerActivity, profile

    def run(body: Callable[[], Any]) -> Callable[[], None]:
        def fn() -> None:
            with profile(activities=[ProfilerActivity.CPU], with_stack=True):
                body()

        return fn

    out = []
    n = max(a.iters // 4, 3)
    for _ in range(3):
        empty = median_forward_ns(run(lambda: None), n)[0]
        full = median_forward_ns(run(lambda: model(x)), n)[0] - empty
        bare = median_forward_ns(lambda: model(x), n)[0]
        out.append(full / bare)
    return statistics.median(out)


if __name__ == "__main__":
    main()
