"""A run's Profile with the rows of a torch.profiler trace of its per-layer pass: the
ops, scripted and compiled modes read their rows off the same kind of trace."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from layerprof.pivot.notes import Note
from layerprof.pivot.records import LayerInfo
from layerprof.trace.attribution import other_ops_notes

if TYPE_CHECKING:
    from layerprof.capture.profiling.profiler import RawTrace
    from layerprof.pivot.profile import Profile


def with_trace(
    base: Profile,
    traced: Profile,
    raw: RawTrace,
    *,
    ops: bool,
    layers: tuple[LayerInfo, ...],
    notes: Sequence[Note],
) -> Profile:
    """The run's Profile with the per-layer rows, operators and device sections of its trace.

    The trace's own notes (written for ``analyze`` readers) are left out: the
    run's notes say how its rows were measured. The operator cap's note is the
    exception: the rows it kept are the ones shown, so it says so as ``analyze`` does.
    """
    capped = other_ops_notes(traced.ops) if ops else []
    known = {i.path for i in layers}
    samples = {p: s for p, s in traced.samples.items() if p in known}
    with_trace = base.with_trace(
        devices=traced.trace.devices,
        kernels=traced.trace.kernels,
        kinds=traced.trace.kinds,
        memcpy=traced.trace.memcpy,
        launches=traced.trace.launches,
        communication=traced.trace.communication,  # collectives (DDP's all-reduces): stragglers
    )
    return replace(
        with_trace,
        layers=layers,
        samples=samples,
        ops=traced.ops if ops else (),
        notes=(*base.notes, *notes, *capped),
        events=raw,
    )
