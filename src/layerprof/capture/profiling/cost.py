"""What ops mode's recording costs each layer, measured and removed.

In ops mode a layer's time is the duration of its ``layer:{path}`` profiler
range, and torch.profiler records every operator that runs inside it: its
begin and end callbacks (taking the time, allocating the event) run on the
model's thread, inside the layer's range. The range itself costs what a
recorded call costs in hooks mode, part inside its own interval, part in
its parent's. Uncorrected, layer times read ~5-20 % above hooks mode's
(benchmarks/ops_overhead.py).

``calibrate_ops`` measures the three figures on a small model run through
the real mechanism (``capture_ops``) and timed without it, in the same
process, medians over iterations, then the median over alternating rounds:

* ``range_inside_ns``: an empty layer's range minus its forward's
  uninstrumented time;
* ``per_op_ns``: (a layer running cheap operators: its range - its
  uninstrumented time - ``range_inside_ns``) / the operator events the trace
  attributes to it;
* ``range_leak_ns``: (the parent's range self time - its uninstrumented
  self time - ``range_inside_ns``) per child range.

``corrected_samples`` subtracts them per layer and iteration, like the hooks
correction (never below zero), counting the operators the trace engine
attributed to the layer in that iteration, and rebuilds totals bottom-up so
``total == self + sum(children)`` stays exact per iteration. Device times and
operator rows are left as recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from layerprof.capture.options import OpOptions
from layerprof.pivot.notes import Note
from layerprof.pivot.records import LayerInfo, LayerSamples, OpStat, Overhead
from layerprof.stats import median
from layerprof.units import human_time

if TYPE_CHECKING:
    import torch

    from layerprof.capture.options import RunOptions
    from layerprof.pivot.profile import Profile

#: About how many operator calls the calibration's operator layer makes.
_CALIBRATION_OPS = 40
_CHILDREN = 8


@dataclass(frozen=True)
class OpsCorrection:
    """ns a recorded operator adds to its layer, and a layer range's own cost."""

    per_op_ns: float
    range_inside_ns: float
    range_leak_ns: float

    def note(self) -> Note:
        per_range_ns = self.range_inside_ns + self.range_leak_ns
        return Note(
            "ops-cost",
            "ops mode: layer times come from torch.profiler ranges; the profiler's own"
            f" recording cost was measured ({human_time(self.per_op_ns)} per recorded"
            f" operator, {human_time(per_range_ns)} per layer"
            " range) and removed from self times; operator rows keep it;"
            " the latency is from the clean pass",
            {"corrected": True, "per_op_ns": self.per_op_ns, "per_range_ns": per_range_ns},
        )


def corrected_samples(
    samples: dict[str, LayerSamples],
    ops: tuple[OpStat, ...],
    layers: tuple[LayerInfo, ...],
    correction: OpsCorrection,
) -> dict[str, LayerSamples]:
    """Ops-mode samples with the recording cost taken out of every layer's self time."""
    if not samples:
        return samples
    n = max(s.self_ns.n for s in samples.values())
    op_counts = _ops_per_layer(ops, n)
    parent = {i.path: i.parent for i in layers}
    kids_calls: dict[str, float] = {}
    for path, s in samples.items():
        up = parent.get(path)
        if up is not None:
            kids_calls[up] = kids_calls.get(up, 0.0) + s.calls
    own: dict[str, np.ndarray] = {}
    for path, s in samples.items():
        if s.self_ns.values is None or len(s.self_ns.values) != n:
            return samples  # summary-only or ragged: nothing to correct per iteration
        cost = (
            op_counts.get(path, 0.0) * correction.per_op_ns
            + s.calls * correction.range_inside_ns
            + kids_calls.get(path, 0.0) * correction.range_leak_ns
        )
        # whole ns before the roll-up, so total == self + sum(children) holds exactly
        own[path] = np.rint(np.maximum(s.self_ns.values - cost, 0.0))
    totals = _roll_up(own, parent, [i.path for i in layers])
    return {
        path: replace(
            s,
            total_ns=np.rint(totals[path]).astype(np.int64),
            self_ns=np.rint(own[path]).astype(np.int64),
        )
        if s.calls
        else s
        for path, s in samples.items()
    }


def _forward_ops(ops: tuple[OpStat, ...], n: int) -> float:
    """Forward operators recorded per iteration, all layers (nested operators included)."""
    counts = _ops_per_layer(ops, n)
    return float(sum(np.sum(c) for c in counts.values()) / max(n, 1))


def _ops_per_layer(ops: tuple[OpStat, ...], n: int) -> dict[str, Any]:
    """Forward operators recorded per layer and iteration (nested operators included)."""
    out: dict[str, Any] = {}
    for op in ops:
        if op.phase != "forward" or op.layer is None or op.samples is None:
            continue
        calls = op.samples.calls.values
        if calls is None or len(calls) != n:
            continue
        out[op.layer] = out.get(op.layer, 0) + calls
    return out


def _roll_up(
    own: dict[str, np.ndarray], parent: dict[str, str | None], order: list[str]
) -> dict[str, np.ndarray]:
    """Per iteration: each layer's self plus its children's totals (deepest first)."""
    totals = {p: v.copy() for p, v in own.items()}
    paths = [p for p in order if p in totals] + [p for p in totals if p not in parent]
    for path in sorted(paths, key=lambda p: -_depth(p)):
        up = parent.get(path)
        while up is not None and up not in totals:
            up = parent.get(up)
        if up is not None:
            totals[up] = totals[up] + totals[path]
    return totals


def _depth(path: str) -> int:
    return 0 if path == "" else path.count(".") + 1


def calibrate_ops(
    device: str = "cpu",
    *,
    iters: int = 25,
    rounds: int = 3,
    capture: Callable[..., Any] | None = None,
) -> OpsCorrection:
    """Measure what ops mode's recording costs (see the module docstring).

    ``rounds`` times, the uninstrumented forwards and then a profiled run of the
    same ``iters``, each round giving the three figures; each figure is the
    median over rounds. One round alone rests on a bare pass and a profiled pass
    taken at different moments: on a shared machine a load change between them
    moved the per-operator cost from ~0.8 us to ~0.25 us.
    """
    import torch

    model, shell = (m.to(device) for m in _calibration_models())
    x = torch.zeros(1, device=device)
    figures = []
    with torch.inference_mode():
        for _ in range(max(rounds, 1)):
            bare = _bare_times(model, shell, x, iters)
            figures.append(_round_figures(model, x, bare, iters, device, capture))
    per_op, inside, leak = (median([f[i] for f in figures]) for i in range(3))
    return OpsCorrection(per_op_ns=per_op, range_inside_ns=inside, range_leak_ns=leak)


def _round_figures(
    model: Any,
    x: Any,
    bare: dict[str, float],
    iters: int,
    device: str,
    capture: Callable[..., Any] | None,
) -> tuple[float, float, float]:
    """(per-op, range inside, range leak) ns of one profiled run against ``bare``."""
    from layerprof.capture.profiling.profiler import capture_ops

    raw = (capture or capture_ops)(
        model, (x,), None, iters=iters, device=device, options=OpOptions()
    )
    traced = raw.profile()
    samples = traced.samples
    empty = median([v for i in range(_CHILDREN) for v in samples[f"empties.{i}"].total_ns])
    busy = median(list(samples["busy"].total_ns))
    root_self = median(list(samples[""].self_ns))
    # Count the events as the correction will: every operator the trace attributes to
    # the layer, nested ones included (an add may record a copy and a cast too).
    events = sum(op.calls for op in traced.ops if op.layer == "busy" and op.phase == "forward")
    inside = max(empty - bare["empty"], 0.0)
    per_op = max((busy - bare["busy"] - inside) / max(events, 1.0), 0.0)
    leak = max((root_self - bare["root_self"] - inside) / (_CHILDREN + 1), 0.0)
    return per_op, inside, leak


def _calibration_models() -> tuple[torch.nn.Module, torch.nn.Module]:
    import torch
    import torch.nn.functional as F

    class Empty(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    class Busy(torch.nn.Module):
        """Common cheap operators on a tiny tensor: what is measured is their recording."""

        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4, 4), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x.expand(2, 4)
            for _ in range(_CALIBRATION_OPS // 8):
                y = F.linear(y, self.weight)
                y = F.layer_norm(y, (4,))
                y = torch.softmax(F.gelu(y), -1).view(2, 4) + y
            return y.sum(0)[:1]

    class Calibration(torch.nn.Module):
        def __init__(self, busy: torch.nn.Module) -> None:
            super().__init__()
            self.empties = torch.nn.ModuleList(Empty() for _ in range(_CHILDREN))
            self.busy = busy

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.empties:
                x = layer(x)
            out: torch.Tensor = self.busy(x)
            return out

    # The shell is the same model with an empty busy layer: the root's own work alone.
    return Calibration(Busy()), Calibration(Empty())


def _bare_times(model: Any, shell: Any, x: Any, iters: int) -> dict[str, float]:
    """Uninstrumented medians: an empty layer's and the busy layer's forward, and the
    root's self time (the shell's forward, whose children are all empty, minus them)."""
    now = time.perf_counter_ns
    empty, busy, root = [], [], []
    leaf = model.empties[0]
    for _ in range(max(iters, 10)):
        t0 = now()
        for _ in range(_CHILDREN):
            leaf.forward(x)
        empty.append((now() - t0) / _CHILDREN)
        t0 = now()
        model.busy.forward(x)
        busy.append(now() - t0)
        t0 = now()
        shell.forward(x)
        root.append(now() - t0)
    e = median(empty)
    return {"empty": e, "busy": median(busy), "root_self": median(root) - (_CHILDREN + 1) * e}


def ops_cost(device: str, opts: RunOptions) -> OpsCorrection:
    """Ops mode's recording cost per operator and layer range (``calibrate_ops``)."""
    return calibrate_ops(device)


def ops_overhead(
    traced: Profile, ops: tuple[OpStat, ...], cost: OpsCorrection, corrected: bool
) -> Overhead:
    """Ops mode's calibrated cost per forward, and the passes' medians: the per-layer
    pass's forward is the root's range, before any correction."""
    roots = [i.path for i in traced.layers if i.parent is None]
    root = traced.samples.get(roots[0]) if len(roots) == 1 else None
    iterations = max((s.total_ns.n for s in traced.samples.values()), default=0)
    calls = sum(s.calls for s in traced.samples.values())
    return Overhead(
        per_call_ns=cost.range_inside_ns + cost.range_leak_ns,
        inside_ns=cost.range_inside_ns,
        corrected=corrected,
        calls_per_forward=calls,
        clean_ns=traced.latency_ns.median if traced.latency_ns is not None else None,
        instrumented_ns=root.total_ns.median if root is not None and root.calls else None,
        method="ops",
        per_op_ns=cost.per_op_ns,
        ops_per_forward=_forward_ops(ops, iterations),
    )
