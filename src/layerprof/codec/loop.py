"""The ``loop`` key of a profile: a training loop's steps and each layer's time per step
(see :mod:`layerprof.pivot.sections.loop`). Optional: files without it load with
``loop=None``. Times are milliseconds, as everywhere in the JSON; ``summary_ms``
(each part's median, spread and the median's confidence interval over the
steps; per layer the same for its forward and backward per step) is derived
and not read back."""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields, summary_dict
from layerprof.errors import ProfileFormatError
from layerprof.pivot.sections.loop import STEP_PARTS, LayerSteps, LoopStep, Recompute, TrainingLoop
from layerprof.units import NS_PER_MS


def encode_loop(loop: TrainingLoop | None) -> dict[str, Any] | None:
    if loop is None:
        return None
    summaries = (
        {p: summary_dict(loop.summary(p)) for p in (*STEP_PARTS, "wall")} if loop.steps else {}
    )
    return {
        "schedule": {"skip": loop.skip, "warmup": loop.warmup, "active": loop.active},
        "parts": list(STEP_PARTS),
        "summary_ms": summaries,
        "steps": [_step(s) for s in loop.steps],
        "layers": [_layer(x) for x in loop.layers],
    } | ({"recompute": [_recompute(r) for r in loop.recompute]} if loop.recompute else {})


def _recompute(r: Recompute) -> dict[str, Any]:
    return {"path": r.path, "per_step_ms": [ns / NS_PER_MS for ns in r.per_step_ns],
            "calls": r.calls}  # fmt: skip


def _step(s: LoopStep) -> dict[str, Any]:
    out: dict[str, Any] = {"index": s.index, "start_ms": s.start_ns / NS_PER_MS,
                           "wall_ms": s.wall_ns / NS_PER_MS}  # fmt: skip
    out |= {f"{p}_ms": ns / NS_PER_MS for p, ns in s.parts()}
    return out | {"forwards": s.forwards, "backwards": s.backwards}


def _layer(x: LayerSteps) -> dict[str, Any]:
    out: dict[str, Any] = {"path": x.path}
    spread: dict[str, Any] = {}
    for key in ("forward_total", "forward_self", "backward_total", "backward_self"):
        values = getattr(x, f"{key}_ns")
        if values is not None:
            out[f"{key}_ms"] = [v / NS_PER_MS for v in values]
        summary = x.summary(key)
        if summary is not None:
            spread[key] = summary_dict(summary)
    return out | {"summary_ms": spread}


def read_loop(f: Fields | None) -> TrainingLoop | None:
    if f is None:
        return None
    schedule = f.obj("schedule")
    steps = tuple(_read_step(s) for s in f.objects("steps"))
    return TrainingLoop(
        steps=steps,
        layers=tuple(_read_layer(x) for x in f.objects("layers")),
        skip=schedule.integer("skip", 0) if schedule else 0,
        warmup=schedule.integer("warmup", 0) if schedule else 0,
        active=schedule.opt_integer("active") if schedule else None,
        recompute=tuple(_read_recompute(r, len(steps)) for r in f.objects("recompute")),
    )


def _read_recompute(f: Fields, steps: int) -> Recompute:
    """One time per active step: the checkpointing finding sums them step by step (a
    shorter list raised IndexError there, an empty one a ValueError)."""
    per_step = f.durations("per_step_ms", required=True)
    if len(per_step) != steps or not per_step:
        raise ProfileFormatError(
            f"{f.where}.per_step_ms: expected one time per step ({steps}), found {len(per_step)}"
        )
    return Recompute(path=f.text("path"), per_step_ns=per_step, calls=f.count("calls", 0))


def _read_step(f: Fields) -> LoopStep:
    # the closure part is newer than the others: files from before it have none (0)
    parts = {f"{p}_ns": f.duration(f"{p}_ms") for p in STEP_PARTS if p != "closure"}
    parts["closure_ns"] = f.opt_duration("closure_ms") or 0
    return LoopStep(
        index=f.count("index"),
        start_ns=f.duration("start_ms"),
        wall_ns=f.duration("wall_ms"),
        forwards=f.count("forwards", 0),
        backwards=f.count("backwards", 0),
        **parts,
    )


def _read_layer(f: Fields) -> LayerSteps:
    def ns_list(key: str) -> tuple[int, ...] | None:
        return f.durations(key) if f.has(key) else None

    return LayerSteps(
        path=f.text("path"),
        forward_total_ns=ns_list("forward_total_ms") or (),
        forward_self_ns=ns_list("forward_self_ms") or (),
        backward_total_ns=ns_list("backward_total_ms"),
        backward_self_ns=ns_list("backward_self_ms"),
    )
