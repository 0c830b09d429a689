"""Serving steps by phase: the roofline annotations of SGLang and patched vLLM.

A step (``trace/steps.py``) is a serving step when its name, or the first annotation
starting inside it, reads ``execute_{tokens}_context_{n}(sq..sk..sqsq..sqsk..)
_generation_{m}(sq..sk..sqsq..sqsk..)``. The name is parsed strictly: whole, decimal
counts of at most 15 digits, and counts that agree (no tokens without requests, at
least one token per prefill request, Σq² >= Σq). Any other ``execute_`` name is left
out with a note; nothing in a name can make the analysis fail.

Each complete step's layer samples are split by phase as a generate's are
(``phase_views``, the KV positions as the decode position); the step's FLOPs are
counted from its matrix products' input shapes (``MATMUL_OPS``: kept even without
``--group-by-shape``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from layerprof.pivot.notes import Note
from layerprof.pivot.sections.stepwork import DEVICE as DEVICE_WINDOW
from layerprof.pivot.sections.trace import Steps
from layerprof.stats import median
from layerprof.trace.events import ANNOTATION, MATMUL_OPS, OP, EventTables
from layerprof.trace.links import Links

if TYPE_CHECKING:
    from layerprof.pivot.sections.serving import BatchPart, Serving, ServingStep
    from layerprof.pivot.sections.stepwork import DeviceWork

PREFIX = "execute_"
_N = r"(\d{1,15})"
_PART = rf"\(sq{_N}sk{_N}sqsq{_N}sqsk{_N}\)"
ANNOTATION_NAME = re.compile(rf"execute_{_N}_context_{_N}{_PART}_generation_{_N}{_PART}")
_DIMS = re.compile(r"\[([\d, ]*)\]")
#: Annotation names kept for the note on those not read.
_SHOWN = 3


def parse(name: str) -> tuple[int, BatchPart, BatchPart] | None:
    """(tokens, prefill, decode) of one annotation, or None when it is not one."""
    from layerprof.pivot.sections.serving import BatchPart  # see serving_steps

    found = ANNOTATION_NAME.fullmatch(name)
    if found is None:
        return None
    n = [int(g) for g in found.groups()]
    prefill = BatchPart(n[1], n[2], n[3], n[4], n[5])
    decode = BatchPart(n[6], n[7], n[8], n[9], n[10])
    if not (_agrees(prefill) and _agrees(decode)):
        return None
    return n[0], prefill, decode


def _agrees(p: BatchPart) -> bool:
    if p.requests == 0:
        return p.tokens == p.kv == p.q_squared == p.qk == 0
    return p.tokens >= p.requests and p.q_squared >= p.tokens


def serving_steps(
    tables: EventTables,
    links: Links,
    steps: Steps,
    samples: Mapping[str, Any],
    work: DeviceWork | None,
) -> tuple[Serving | None, list[Note]]:
    """The serving section of a trace whose steps carry roofline annotations, or None."""
    done = steps.complete
    names = step_names(tables, done, steps.thread)
    if not any(n.startswith(PREFIX) for n in names if n):
        return None, []
    # here, not at the top: a trace with no serving steps never creates these types
    from layerprof.pivot.sections.generation import phase_views
    from layerprof.pivot.sections.serving import (  # as above: created only when used
        DEVICE_CLOCK,
        HOST_CLOCK,
        Serving,
        ServingStep,
    )

    times = _step_times(done, work)
    flops = _Flops(tables, links)
    rows: list[ServingStep] = []
    phases, positions = step_phases(names)
    ignored = [n for n, p in zip(names, phases, strict=True) if p is None and n.startswith(PREFIX)]
    for s, name, time, phase in zip(done, names, times, phases, strict=True):
        parsed = parse(name) if phase is not None else None
        if parsed is None or phase is None:
            continue
        tokens, pre, dec = parsed
        counted, flop_ns, busy = flops.within(s.start_ns, s.end_ns)
        rows.append(
            ServingStep(
                name=name or s.name, phase=phase, tokens=tokens, prefill=pre, decode=dec,
                time_ns=time, flops=counted or None, flop_device_ns=flop_ns,
                flop_coverage=flop_ns / busy if counted and busy else None,
            )
        )  # fmt: skip
    if not rows:
        return None, _ignored_notes(ignored)
    # a serving step's kernels run after its host span (queued, or a graph replayed):
    # each layer's phase time is its kernels' where the trace has them
    device = tables.has_device and any(x.device_self_ns is not None for x in samples.values())
    views = (
        phase_views(samples, phases, positions, tokens_per_forward(rows), device=device)
        if samples
        else ()
    )
    clock = DEVICE_CLOCK if device else HOST_CLOCK
    section = Serving(tuple(rows), views, tuple(ignored[:_SHOWN]), len(ignored), clock)
    return section, [*_ignored_notes(ignored), *flop_notes(section)]


def step_phases(names: list[str]) -> tuple[list[str | None], list[float | None]]:
    """Per step annotation (``step_names``): its phase and KV positions (None: not a
    serving step, or one of no request)."""
    from layerprof.pivot.sections.serving import DECODE, MIXED, PREFILL  # see serving_steps

    phases: list[str | None] = []
    positions: list[float | None] = []
    for name in names:
        parsed = parse(name) if name else None
        if parsed is None or not (parsed[1].requests or parsed[2].requests):
            phases.append(None)
            positions.append(None)
            continue
        _, pre, dec = parsed
        phases.append(
            MIXED if pre.requests and dec.requests else PREFILL if pre.requests else DECODE
        )
        positions.append(float(dec.kv + pre.kv))
    return phases, positions


def tokens_per_forward(rows: Sequence[ServingStep]) -> dict[str, int]:
    """Per phase, the median query tokens of its steps."""
    return {
        p: int(median([r.prefill.tokens + r.decode.tokens for r in rows if r.phase == p]))
        for p in dict.fromkeys(r.phase for r in rows)
    }


def step_names(tables: EventTables, done: tuple[Any, ...], thread: int | None) -> list[str]:
    """Each step's annotation: its own name when it is one, else the first annotation
    starting inside it that begins with ``execute_`` ("" when none)."""
    host = tables.host
    ids = [i for i, n in enumerate(tables.names) if n.startswith(PREFIX)]
    idx = np.flatnonzero((host.kind == ANNOTATION) & np.isin(host.name, ids))
    if thread is not None:
        idx = idx[host.thread[idx] == thread]
    idx = idx[np.argsort(host.start[idx], kind="stable")]
    starts = host.start[idx]
    out = []
    for s in done:
        if s.name.startswith(PREFIX):
            out.append(s.name)
            continue
        k = int(np.searchsorted(starts, s.start_ns))
        inside = k < len(starts) and starts[k] < s.end_ns
        out.append(tables.names[int(host.name[idx[k]])] if inside else "")
    return out


def _step_times(done: tuple[Any, ...], work: DeviceWork | None) -> list[int]:
    """Each step's time: its device work's own span where that ran outside the host
    span (the longest over the devices), else the host span. ``work`` holds one row
    per device and step, the steps in start order (names may repeat: matched by place)."""
    times = [s.dur_ns for s in done]
    if work is None or not done:
        return times
    order = sorted(range(len(done)), key=lambda i: done[i].start_ns)
    longest: dict[int, int] = {}
    for k, row in enumerate(work.steps):
        if row.window == DEVICE_WINDOW:
            i = order[k % len(done)]
            longest[i] = max(longest.get(i, 0), row.window_ns)
    return [longest.get(i, t) for i, t in enumerate(times)]


class _Flops:
    """FLOPs of the matrix products that kept their input shapes, by start time, with the
    device time of the kernels they launched."""

    def __init__(self, tables: EventTables, links: Links) -> None:
        host, dev = tables.host, tables.device
        ids = [i for i, n in enumerate(tables.names) if n in MATMUL_OPS]
        idx = np.flatnonzero(np.isin(host.name, ids) & (host.kind == OP) & (host.shape >= 0))
        counts = np.asarray(
            [matmul_flops(tables.names[int(host.name[i])], tables.shapes[int(host.shape[i])])
             for i in idx.tolist()], dtype=np.int64,
        ).reshape(-1)  # fmt: skip
        kernel_ns = np.zeros(len(host), dtype=np.int64)
        launched = links.op >= 0
        np.add.at(kernel_ns, links.op[launched], dev.dur[launched])
        keep = counts > 0
        idx, counts = idx[keep], counts[keep]
        order = np.argsort(host.start[idx], kind="stable")
        self.start = host.start[idx][order]
        self.flops = counts[order]
        self.kernel_ns = kernel_ns[idx][order]
        launch = np.where(links.runtime >= 0, host.start[np.clip(links.runtime, 0, None)], -1)
        by_launch = np.argsort(launch, kind="stable")
        self.launch = launch[by_launch]
        self.device_ns = np.concatenate(([0], np.cumsum(dev.dur[by_launch])))

    def within(self, lo: int, hi: int) -> tuple[int, int, int]:
        """(FLOPs, their kernels' ns, all device ops' ns) of what started or was launched
        in [lo, hi)."""
        a, b = np.searchsorted(self.start, [lo, hi])
        c, d = np.searchsorted(self.launch, [lo, hi])
        device = int(self.device_ns[d] - self.device_ns[c])
        return int(self.flops[a:b].sum()), int(self.kernel_ns[a:b].sum()), device


def matmul_flops(name: str, shapes: str) -> int:
    """2·m·k·n (times the batch) from the inputs' dims; 0 when they do not fit."""
    dims = [[int(x) for x in d.split(",") if x.strip()] for d in _DIMS.findall(shapes)]
    if name in ("aten::addmm", "aten::baddbmm"):
        dims = dims[1:]  # the bias (or input) comes first
    if len(dims) < 2:
        return 0
    a, b = dims[0], dims[1]
    if name.endswith("bmm") and len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return 2 * a[0] * a[1] * a[2] * b[2]
    if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return 2 * a[0] * a[1] * b[1]
    return 0


def _ignored_notes(ignored: list[str]) -> list[Note]:
    if not ignored:
        return []
    shown = ", ".join(repr(n[:80]) for n in ignored[:_SHOWN])
    more = f" and {len(ignored) - _SHOWN} more" if len(ignored) > _SHOWN else ""
    text = (
        f"{len(ignored)} step annotations begin with {PREFIX!r} but are not the roofline"
        f" convention (or their counts disagree): {shown}{more}; those steps have no phase"
    )
    return [Note("serving-annotations-ignored", text, {"count": len(ignored)})]


def flop_notes(section: Serving, uncounted: Sequence[str] = ()) -> list[Note]:
    """The note on steps whose FLOPs are not counted or cover under half their device
    time; ``uncounted``: the ops (or kernels) holding most of the uncounted time, where
    known (a replay read through its capture)."""
    steps = section.steps
    counted = [s for s in steps if s.flops]
    if len(counted) == len(steps) and all((s.flop_coverage or 0) >= 0.5 for s in counted):
        return []
    low = [s.flop_coverage for s in counted if s.flop_coverage is not None]
    share = (
        f"; the counted products' kernels are {max(low):.0%} of a step's device time at most"
        if low
        else ""
    )
    why = (
        "; attention (Σq·k) and kernels with no op shapes (a CUDA/HIP graph replay: its"
        " kernels have no ops; analyze --capture gives them the captured ops') are not"
        " counted, so a step's roofline covers only those products"
    )
    if uncounted:
        why = (
            "; read through the capture, the device time not counted is mostly in "
            + ", ".join(uncounted)
            + " (custom ops, attention, and products captured without record_shapes have no"
            " shapes to count), so a step's roofline covers only the counted products"
        )
    text = (
        f"serving steps' FLOPs: counted for {len(counted)} of {len(steps)} steps, from the"
        " input shapes of their matrix products (aten::mm, addmm, bmm, baddbmm)" + share + why
    )
    return [Note("serving-flops", text, {"counted": len(counted), "steps": len(steps)})]
