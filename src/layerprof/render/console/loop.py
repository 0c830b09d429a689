"""The console table of a training loop's steps: data wait, forward, backward, (a
closure's own code,) optimizer and rest per step (they add up to the step), and their
medians."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table
from rich.text import Text

from layerprof.render.loop_text import recompute_line
from layerprof.units import unit_for

if TYPE_CHECKING:
    from rich.console import Console

    from layerprof.pivot.profile import Profile
    from layerprof.pivot.sections.loop import LoopStep, TrainingLoop

#: Steps listed one by one; beyond this, the first and last few and the medians.
_STEP_ROWS = 12

PART_LABELS = {
    "data_wait": "Data wait", "forward": "Forward", "backward": "Backward",
    "closure": "Closure", "optimizer": "Optimizer", "rest": "Rest",
}  # fmt: skip


def print_loop(console: Console, profile: Profile) -> None:
    """The per-step table of a Recorder's training loop (nothing without one)."""
    loop = profile.loop
    if loop is None or not loop.steps:
        return
    unit = unit_for(max(s.wall_ns for s in loop.steps))
    table = Table(
        title=Text(f"training steps ({unit.name}; host time; the parts add up to the step)"),
        box=box.SIMPLE_HEAD, title_justify="left", title_style="bold",
    )  # fmt: skip
    parts = loop.shown_parts()
    table.add_column("Step", justify="right")
    for part in parts:
        table.add_column(PART_LABELS[part], justify="right")
    table.add_column("Total", justify="right")
    for step in _shown(loop.steps):
        if step is None:
            table.add_row("...", *[""] * (len(parts) + 1))
            continue
        values = dict(step.parts())
        table.add_row(str(step.index), *[unit.fmt(values[p]) for p in parts],
                      unit.fmt(step.wall_ns))  # fmt: skip
    if len(loop.steps) > 1:
        table.add_row(
            Text("median", style="bold"),
            *[unit.fmt(loop.summary(p).median) for p in (*parts, "wall")],
        )
        table.add_row(Text("share", style="dim"), *_shares(loop, parts), "")
    console.print(table)
    console.print(Text(_caption(loop), style="dim"))
    if loop.recompute:
        console.print(Text(recompute_line(loop), style="dim"))


def _shown(steps: tuple[LoopStep, ...]) -> list[LoopStep | None]:
    if len(steps) <= _STEP_ROWS:
        return list(steps)
    half = _STEP_ROWS // 2
    return [*steps[:half], None, *steps[-half:]]


def _shares(loop: TrainingLoop, parts: tuple[str, ...]) -> list[Text]:
    wall = sum(loop.part("wall")) or 1
    return [Text(f"{100 * sum(loop.part(p)) / wall:.0f} %", style="dim") for p in parts]


def _caption(loop: TrainingLoop) -> str:
    kept = f"{len(loop.steps)} active step{'s' if len(loop.steps) != 1 else ''}"
    skipped = []
    if loop.skip:
        skipped.append(f"{loop.skip} skipped")
    if loop.warmup:
        skipped.append(f"{loop.warmup} warm-up")
    extra = f" (after {' and '.join(skipped)})" if skipped else ""
    return (
        f"{kept}{extra}; data wait: uncovered time before each forward, or before the"
        " optimizer step whose closure runs it (the loader); rest: a loss computed outside"
        " the model and its backward, zero_grad, logging, your code; inside"
        " optimizer.step(closure) the closure's forward and backward count as such, its"
        " other code as closure (docs/definitions.md)"
    )
