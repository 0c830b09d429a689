"""The ``device_work`` key of a trace profile (see :mod:`layerprof.pivot.sections.stepwork`):
each complete step's work per device, the window its idle time and breakdown were
measured over, and each device's clock check. Optional: files without it load with
``device_work=None``. Times are milliseconds."""

from __future__ import annotations

from typing import Any

from layerprof.codec.fields import Fields, asdict_ms, read_row
from layerprof.pivot.sections.stepwork import ClockCheck, DeviceWork, StepWork


def encode_device_work(w: DeviceWork | None) -> dict[str, Any] | None:
    if w is None:
        return None
    return {
        "steps": [asdict_ms(s) for s in w.steps],
        "clocks": [asdict_ms(c) for c in w.clocks],
    }


def read_device_work(f: Fields | None) -> DeviceWork | None:
    if f is None:
        return None
    return DeviceWork(
        steps=tuple(read_row(StepWork, s) for s in f.objects("steps")),
        clocks=tuple(read_row(ClockCheck, c) for c in f.objects("clocks")),
    )
