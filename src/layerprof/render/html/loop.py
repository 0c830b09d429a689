"""The training-steps card of a Recorder's loop: each step as a stacked bar of data wait,
forward, backward, (a closure's own code,) optimizer and rest (as TensorBoard's step view drew them), and a
table of the steps with the medians and their confidence intervals."""

from __future__ import annotations

from dataclasses import dataclass

from layerprof.pivot.sections.loop import LoopStep
from layerprof.render.html.charts import BarSeries, Colour, bars
from layerprof.render.html.page import (
    Col,
    Section,
    calls_col,
    chart_slot,
    table,
    text_col,
    time_col,
)
from layerprof.render.html.subject import Subject
from layerprof.render.loop_text import recompute_line
from layerprof.units import NS_PER_MS, TimeUnit, fmt_share, human_time, unit_for

#: Bars drawn; a longer loop shows its first steps.
MAX_BARS = 60
#: Table rows: past this, the first and last steps and the slowest between them (a page
#: of 200k steps' rows was 160 MB, more than a browser opens); the medians are over all.
MAX_ROWS = 300

_PARTS: dict[str, tuple[str, Colour]] = {
    "data_wait": ("Data wait", "bad"), "forward": ("Forward", "accent"),
    "backward": ("Backward", "info"), "closure": ("Closure", "warn"),
    "optimizer": ("Optimizer", "good"), "rest": ("Rest", "muted"),
}  # fmt: skip


@dataclass(frozen=True)
class _Row:
    label: str
    step: LoopStep | None  # None: the medians row
    values: dict[str, float]


def loop_section(s: Subject) -> Section | None:
    """Nothing without a training loop (``Recorder(model, backward=True)``)."""
    loop = s.profile.loop if s.profile is not None else None
    if loop is None or not loop.steps:
        return None
    shown = loop.steps[:MAX_BARS]
    parts = loop.shown_parts()
    chart = bars(
        "Step time by part",
        [f"step {st.index}" for st in shown],
        [BarSeries(_PARTS[p][0], tuple(ns / NS_PER_MS for _, ns in _part(shown, p)), _PARTS[p][1])
         for p in parts],
        axis="ms", stack=True,
    )  # fmt: skip
    listed = _listed(loop.steps)
    rows = [_Row(str(st.index), st, {p: float(ns) for p, ns in st.parts()} | {"wall": st.wall_ns})
            for st in listed]  # fmt: skip
    medians = {p: loop.summary(p).median for p in (*parts, "wall")}
    rows.append(_Row("median", None, medians))
    unit = unit_for(max(st.wall_ns for st in loop.steps))
    wall = sum(loop.part("wall")) or 1

    def tip(part: str) -> str:
        summary = loop.summary(part)
        ci = ""
        if summary.ci_low is not None and summary.ci_high is not None:
            ci = f"; median {human_time(summary.median)}, 95 % interval"
            ci += f" {human_time(summary.ci_low)} - {human_time(summary.ci_high)}"
        return f"{fmt_share(sum(loop.part(part)) / wall)} of the steps' time{ci}"

    cols: list[Col[_Row]] = [
        text_col("Step", lambda r: r.label),
        calls_col("Forwards", lambda r: r.step.forwards if r.step else None),
        calls_col("Backwards", lambda r: r.step.backwards if r.step else None),
        *[_part_col(p, unit, tip(p)) for p in parts],
        time_col("Total", lambda r: r.values["wall"], unit),
    ]
    cut = f" The chart shows the first {MAX_BARS}." if len(loop.steps) > MAX_BARS else ""
    if len(listed) < len(loop.steps):
        third = MAX_ROWS // 3
        cut += (
            f" The table lists {len(listed)} of the {len(loop.steps)} steps: the first"
            f" {third}, the last {third} and the {third} slowest between them; its median"
            " row is over every step."
        )
    if loop.recompute:
        line = recompute_line(loop)  # (str.capitalize would lower the layer paths)
        cut += f" {line[:1].upper()}{line[1:]}."
    closure = (
        "closure (the closure's own code: zero_grad, the loss, the framework around them), "
        if "closure" in parts
        else ""
    )
    intro = (
        "Each step's wall time (host), partitioned: data wait (uncovered time before each"
        " forward of the model, or before the optimizer step whose closure runs it: the"
        " loader), forward, backward (from the gradient reaching the model to the end of the"
        f" backward pass), {closure}"
        "optimizer (Optimizer.step's own update: a closure's forward and backward count"
        " as such), and rest (a loss computed outside the model, zero_grad, logging, your"
        " code). The parts add up to the step." + cut
    )
    body = chart_slot("lp-loop") + table("lp-loop-steps", cols, rows)
    return Section("loop", "Training steps", body, intro, {"lp-loop": chart})


def _listed(steps: tuple[LoopStep, ...]) -> list[LoopStep]:
    """Every step, or past ``MAX_ROWS`` the first and last third of them and the slowest
    third of the ones between, in step order."""
    if len(steps) <= MAX_ROWS:
        return list(steps)
    third = MAX_ROWS // 3
    middle = sorted(steps[third:-third], key=lambda st: -st.wall_ns)[:third]
    return [*steps[:third], *sorted(middle, key=lambda st: st.index), *steps[-third:]]


def _part(steps: tuple[LoopStep, ...], part: str) -> list[tuple[str, int]]:
    return [(part, int(getattr(st, f"{part}_ns"))) for st in steps]


def _part_col(part: str, unit: TimeUnit, tip: str) -> Col[_Row]:
    return time_col(_PARTS[part][0], lambda r: r.values[part], unit, tip=lambda r: tip)
