"""What a recorded call costs (``calibrate``), and whether a record has it removed.

The Recorder's wrappers cost time inside each layer's interval and in its
parent's; ``calibrate`` measures both on a model of its own, as the stdlib
``profile`` module calibrates, and ``layertimes`` takes them out of the host
times (docs/definitions.md). By default that correction is made on the real
host clock and not on a test clock (``wants_correction``); a busy machine's
noise can swallow the cost, and then nothing is corrected and a note says why
(``unmeasured_note``).

Calibration times the Recorder's own timing wrappers (``wrappers.timed``) on
every module, without the Recorder around them: what the Recorder adds per
forward (signatures, shapes, phase tags) runs outside every timed interval, so
it is no part of what a layer's time carries.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from layerprof.capture.compilewatch import dynamo_compiling
from layerprof.capture.modules import ForwardWrapper, HookHandles, wrappable_modules
from layerprof.capture.platform.clocks import Clock, CudaEventClock, HostClock, synchronizer
from layerprof.capture.recording.forwardlog import ForwardLog
from layerprof.capture.recording.layertimes import Correction
from layerprof.capture.recording.wrappers import timed
from layerprof.pivot.notes import Note
from layerprof.pivot.records import Overhead
from layerprof.stats import median

if TYPE_CHECKING:
    import torch


def wants_correction(correct: bool | None, default: bool | None, clock: Clock) -> bool:
    """``correct``, else the Recorder's ``default``, else true for the real host clock and
    false for a test clock."""
    if correct is None:
        correct = default
    return correct if correct is not None else type(clock) is HostClock


def correction_for(wanted: bool, given: Correction | None) -> Correction | None:
    """The correction to apply when ``wanted``: ``given`` (the runner's), or a calibrated one
    (measured again once when a busy machine's noise swallowed the hooks' cost)."""
    if not wanted:
        return None
    if given is not None:
        return given
    return measured_calibration()


def overhead_of(
    correction: Correction | None, given: Correction | None, calls_per_forward: float
) -> tuple[Overhead | None, tuple[Note, ...]]:
    """What was removed from a record's times (``correction``; None: nothing), and a note
    when a calibration of the record's own (not ``given``) read 0: nothing was then."""
    if correction is not None and not correction.measured and given is None:
        return None, (unmeasured_note(),)
    if correction is None:
        return None, ()
    overhead = Overhead(
        per_call_ns=correction.per_call_ns,
        inside_ns=correction.inside_ns,
        corrected=True,
        calls_per_forward=calls_per_forward,
    )
    return overhead, ()


def measured_calibration(device: str = "cpu") -> Correction:
    """``calibrate``, measured again once when a busy machine's noise swallowed the hooks'
    cost (it read 0); still 0 then: see ``unmeasured_note``."""
    found = calibrate(device)
    return found if found.measured else calibrate(device)


def unmeasured_note() -> Note:
    """ "0.0 µs per hooked call" is no measurement (a recorded call costs something): the
    times are left uncorrected, and the profile says why."""
    return Note(
        "overhead-unmeasured",
        "the hooks' cost per call could not be measured: the calibration read 0 against"
        " the noise of a busy machine (twice), so layer times are not corrected for it",
    )


def calibrate(device: str = "cpu", *, children: int = 50, repeats: int = 120) -> Correction:
    """Measure what a recorded call costs, inside its own interval and in its parent's.

    On a model of ``children`` layers running one cheap operator each, the same forward runs without
    and with the Recorder's wrappers, in alternating rounds (the machine's load hits
    both alike), and each figure is a median:

    * ``inside_ns`` = a layer's measured duration minus its forward's
      uninstrumented time: the wrapper's work between its two clock reads;
    * the leak per child = (the parent's measured self time - its
      uninstrumented self time - ``inside_ns``) / ``children``: the
      wrapper's work outside the child's interval, which its parent pays.
      The uninstrumented self time is the parent's forward minus its
      children's forwards, so the Python cost of calling a module stays the
      caller's, as it is in an uninstrumented run;
    * ``per_call_ns`` = inside + leak: the whole cost of one recorded call.

    On CUDA the wrappers also record CUDA events, so calibration runs on the
    same device with the same clocks; what it measures is host time.
    """
    import torch

    class Small(torch.nn.Module):
        # One cheap operator, not an empty forward: between two recorded calls of a
        # real model the CPU runs torch code, which leaves the wrapper's path colder
        # (and dearer) than back-to-back empty calls would (benchmarks/accuracy.py).
        def forward(self, x: Any) -> Any:
            return x + 1

    class Wide(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(Small() for _ in range(children))

        def forward(self, x: Any) -> Any:
            for layer in self.layers:
                x = layer(x)
            return x

    model = Wide()
    x = torch.zeros(1, device=device)
    sync = synchronizer(device)
    dclock = CudaEventClock(device) if device.startswith("cuda") else None
    log, attach = _instrument(model, dclock)
    bare_parent: list[int] = []
    bare_leaf: list[float] = []
    now = time.perf_counter_ns
    rounds = 8
    per_round = max(repeats // rounds, 2)
    for _ in range(rounds):
        for _ in range(per_round):
            t0 = now()
            for layer in model.layers:
                layer.forward(x)
            bare_leaf.append((now() - t0) / children)
            sync()
            t0 = now()
            model.forward(x)
            bare_parent.append(now() - t0)
        wrappers = attach()
        try:
            for _ in range(per_round):
                sync()
                model(x)
        finally:
            wrappers.remove()
    log.compact(inside_forward=False)
    table = log.table()
    durations = table.end - table.start
    root = table.level == 1
    inside = max(median(durations[~root].tolist()) - median(bare_leaf), 0.0)
    per_iter_children = np.bincount(
        np.cumsum(root)[~root] - 1, weights=durations[~root], minlength=int(root.sum())
    )
    measured_self = median((durations[root] - per_iter_children).tolist())
    bare_self = median(bare_parent) - children * median(bare_leaf)
    leak = max((measured_self - bare_self - inside) / children, 0.0)
    return Correction(per_call_ns=inside + leak, inside_ns=inside)


def _instrument(
    model: torch.nn.Module, device_clock: Clock | None
) -> tuple[ForwardLog, Callable[[], HookHandles]]:
    """A log, and what puts the Recorder's timing wrapper on every module of ``model``
    (host clock; ``device_clock``'s marks too on CUDA), writing to it."""
    modules = wrappable_modules(model)
    log = ForwardLog([path for path, _ in modules], device_clock)
    mark = HostClock().mark

    def raised() -> None:
        log.raised(mark())

    make = functools.partial(timed, log=log, mark=mark, raised=raised, compiling=dynamo_compiling())

    def attach() -> HookHandles:
        wrappers = HookHandles()
        with wrappers.registering():
            for pid, (_, module) in enumerate(modules):
                wrappers.add(ForwardWrapper(module, functools.partial(make, pid)))
        return wrappers

    return log, attach
