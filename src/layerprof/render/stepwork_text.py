"""The words and rows of a trace's device work (``Profile.device_work``) that the console
and the HTML report share: which steps were measured over their work's own span on the
device, and what each device's clock check found."""

from __future__ import annotations

from layerprof.pivot.sections.stepwork import DEVICE, ClockCheck, DeviceWork, StepWork
from layerprof.units import human_time

#: The HEADERS of ``work_rows`` (times in ms).
WORK_HEADERS = ("step", "device", "ops", "busy ms", "window", "window ms", "after host ms")


def shown(work: DeviceWork | None) -> bool:
    """Whether there is anything to say: a step measured on the device's own timeline,
    or a device whose clock check found something."""
    if work is None:
        return False
    return bool(work.on_device) or any(_odd(c) for c in work.clocks)


def work_rows(work: DeviceWork, most: int) -> list[tuple[str, ...]]:
    """One row per step and device measured over its work's own span (the first
    ``most``; ``work_title`` says how many there are)."""
    return [_row(s) for s in work.on_device[:most]]


def work_title(work: DeviceWork, most: int) -> str:
    moved = len(work.on_device)
    shown = f" ({most} of {moved})" if moved > most else ""
    return (
        f"steps measured on the device's own timeline{shown} (their work ran outside the host step)"
    )


def _row(s: StepWork) -> tuple[str, ...]:
    return (
        s.step,
        str(s.device),
        f"{s.ops:,}",
        f"{s.busy_ns / 1e6:.3f}",
        "device's own" if s.window == DEVICE else "host step",
        f"{s.window_ns / 1e6:.3f}",
        f"{s.after_ns / 1e6:.3f}",
    )


def clock_lines(work: DeviceWork) -> list[str]:
    """One line per device whose clock check found something."""
    return [clock_line(c) for c in work.clocks if _odd(c)]


def clock_line(c: ClockCheck) -> str:
    parts = [
        f"device {c.device}: {c.before_launch:,} of {c.launched:,} launched ops start before"
        " their launch call began"
        + (f" (by up to {human_time(c.lead_ns)}: the clocks disagree)" if c.before_launch else "")
    ]
    if c.inside_launch:
        parts.append(f"{c.inside_launch:,} inside it (graph launches, blocking copies)")
    if c.queued_idle_ns:
        parts.append(f"longest idle with launched work waiting {human_time(c.queued_idle_ns)}")
    return "; ".join(parts)


def _odd(c: ClockCheck) -> bool:
    # the threshold of trace/stepwork.py's note (launches take microseconds)
    return c.before_launch > 0 or c.queued_idle_ns >= 1_000_000
