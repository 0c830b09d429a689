"""Each step's device work, the window it is measured over, and the clocks' agreement.

A step's work on a device is the device ops whose launch call (``args.correlation``)
starts inside the step's host span, on any thread. Per device and complete step:

* no work, or all of it inside the host span: the window is the host span, as
  before (the device's idle time while the host prepared the step is the step's);
* else (the work ran past the span: launches queue, a graph replays after its
  launch returned; or the device's clock disagrees with the host's): the window
  ends at the work's last op and starts at the host span's start when the work
  began inside it on agreeing clocks, else at the work's first op (no host time is
  trusted). Windows are tiled in step order, one starting no earlier than the one
  before ended, so no device time counts in two steps.

A device most of whose ops have no launch call in the trace (a filtered or sampled
trace) keeps the host spans: what its steps launched is not known; unless none of
its ops runs inside them while the steps launched some, since a device that ran the
steps' kernels is never called idle through them.

The clocks disagree on a device when one of its ops starts before its launch call
began (``before_launch``). An op starting inside its launch call is not counted as
disagreement: a graph launch's kernels, a blocking copy and a kernel an idle device
starts before the call returns all do that on agreeing clocks (87 and 198 such
kernels in HTA's A100 ``trace_filter`` traces, none before its launch began).
"""

from __future__ import annotations

import numpy as np

from layerprof.pivot.notes import Note
from layerprof.pivot.sections.stepwork import DEVICE, HOST, ClockCheck, DeviceWork, StepWork
from layerprof.pivot.sections.trace import Step, Steps
from layerprof.trace.columns import unique
from layerprof.trace.events import I64, EventTables
from layerprof.trace.gpu import overlap, union
from layerprof.trace.links import Links
from layerprof.units import human_time

Window = tuple[int, int]
#: The share of a device's ops whose launch the trace must hold for its steps' work to
#: be known (a filtered trace may keep few: HTA's trace_compare keeps 2 of 18).
KNOWN_SHARE = 0.5


def step_work(
    tables: EventTables, links: Links, found: Steps
) -> tuple[DeviceWork | None, dict[int, list[Window]]]:
    """The complete steps' work per device and, per device, each one's window (in
    start order); nothing where the trace has no device ops or no complete step."""
    dev, host = tables.device, tables.host
    steps = found.complete
    if not len(dev) or not steps or found.source == "trace":
        return None, {}
    rt = links.runtime
    launched = rt >= 0
    safe = np.clip(rt, 0, None)
    launch_start = np.where(launched, host.start[safe], -1)
    launch_end = np.where(launched, host.end[safe], -1)
    ordered = sorted(steps, key=lambda s: s.start_ns)
    rows: list[StepWork] = []
    clocks: list[ClockCheck] = []
    windows: dict[int, list[Window]] = {}
    for d in unique(dev.device).tolist():
        on = np.flatnonzero(dev.device == d)
        check = _clock(int(d), on, tables, launched, launch_start, launch_end)
        clocks.append(check)
        work = _Work(tables, on[launched[on]], launch_start, ordered)
        # most of its ops' launches missing (a filtered trace): a step's work is not known,
        # unless the host spans would hold none of the device's time while the steps
        # launched some of it (never 0 % for a device that ran the steps' kernels)
        known = bool(launched[on].mean() >= KNOWN_SHARE) or (
            bool(work.count.any()) and not _busy_inside(tables, on, ordered)
        )
        own: list[Window] = []
        prev_end: int | None = None
        for i, s in enumerate(ordered):
            row = _row(s, int(d), work, i, check.disagree, prev_end, known)
            rows.append(row)
            own.append((row.window_start_ns, row.window_start_ns + row.window_ns))
            prev_end = own[-1][1]
        windows[int(d)] = own
    return DeviceWork(tuple(rows), tuple(clocks)), windows


class _Work:
    """Per step (in start order), the ops of one device it launched: how many, the
    first one's start, the last one's end and the union of their intervals."""

    def __init__(self, tables: EventTables, ops: I64, launch_start: I64, steps: list[Step]) -> None:
        dev = tables.device
        n = len(steps)
        starts = np.asarray([s.start_ns for s in steps], dtype=np.int64)
        ends = np.asarray([s.end_ns for s in steps], dtype=np.int64)
        ops = ops[np.argsort(launch_start[ops], kind="stable")]
        at = launch_start[ops]
        group = np.searchsorted(starts, at, side="right") - 1
        inside = (group >= 0) & (at < ends[np.clip(group, 0, None)])
        ops, group = ops[inside], group[inside]
        self.count = np.bincount(group, minlength=n)
        self.first = np.zeros(n, dtype=np.int64)
        self.last = np.zeros(n, dtype=np.int64)
        self.busy = np.zeros(n, dtype=np.int64)
        if not len(ops):
            return
        bounds = np.flatnonzero(np.diff(group, prepend=-1))  # each group's first op
        held = group[bounds]
        self.first[held] = np.minimum.reduceat(dev.start[ops], bounds)
        self.last[held] = np.maximum.reduceat(dev.end[ops], bounds)
        self.busy = _unions(dev.start[ops], dev.end[ops], group, n)


def _busy_inside(tables: EventTables, on: I64, steps: list[Step]) -> bool:
    """Whether any of the device's ops runs inside a step's host span."""
    seg_s, seg_e, _ = union(tables.device.start[on], tables.device.end[on])
    return overlap(seg_s, seg_e, [(s.start_ns, s.end_ns) for s in steps]) > 0


def _unions(start: I64, end: I64, group: I64, n: int) -> I64:
    """The length of the union of each group's intervals: the groups are moved apart on
    one line (group g by g spans of the whole extent), so one union serves them all."""
    base = int(start.min())
    span = int(end.max()) - base + 1
    if n * span >= 2**62:  # too far apart to share one line: one union per group
        out = np.zeros(n, dtype=np.int64)
        for g in np.unique(group).tolist():
            seg_s, seg_e, _ = union(start[group == g], end[group == g])
            out[g] = int((seg_e - seg_s).sum())
        return out
    shift = group * span - base
    seg_s, seg_e, _ = union(start + shift, end + shift)
    lengths: I64 = np.bincount(seg_s // span, weights=seg_e - seg_s, minlength=n).astype(np.int64)
    return lengths


def _row(
    s: Step, device: int, work: _Work, i: int, skewed: bool, prev_end: int | None, known: bool
) -> StepWork:
    ops = int(work.count[i])
    if not ops or not known:
        lo, hi = _tiled(s.start_ns, s.end_ns, prev_end)
        first, last = (int(work.first[i]), int(work.last[i])) if ops else (None, None)
        after = max(0, last - s.end_ns) if last is not None else 0
        busy = int(work.busy[i])
        return StepWork(s.name, device, ops, busy, first, last, after, HOST, lo, hi - lo)
    first, last, busy = int(work.first[i]), int(work.last[i]), int(work.busy[i])
    after = max(0, last - s.end_ns)
    if not skewed and first >= s.start_ns and last <= s.end_ns:
        lo, hi = _tiled(s.start_ns, s.end_ns, prev_end)
        return StepWork(s.name, device, ops, busy, first, last, 0, HOST, lo, hi - lo)
    began_inside = not skewed and s.start_ns <= first <= s.end_ns
    lo, hi = _tiled(s.start_ns if began_inside else first, last, prev_end)
    return StepWork(s.name, device, ops, busy, first, last, after, DEVICE, lo, hi - lo)


def _tiled(lo: int, hi: int, prev_end: int | None) -> Window:
    """The window, starting no earlier than the previous step's ended."""
    if prev_end is not None and lo < prev_end:
        lo = prev_end
    return lo, max(lo, hi)


def _clock(
    device: int,
    on: I64,
    tables: EventTables,
    launched: np.ndarray,
    launch_start: I64,
    launch_end: I64,
) -> ClockCheck:
    dev = tables.device
    hit = on[launched[on]]
    start = dev.start[hit]
    lead = launch_start[hit] - start
    before = lead > 0
    inside = ~before & (start < launch_end[hit])
    return ClockCheck(
        device=device,
        launched=len(hit),
        before_launch=int(before.sum()),
        lead_ns=int(lead[before].max()) if before.any() else 0,
        inside_launch=int(inside.sum()),
        queued_idle_ns=_queued_idle(tables, on, launched, launch_end),
    )


def _queued_idle(tables: EventTables, on: I64, launched: np.ndarray, launch_end: I64) -> int:
    """The longest stretch the device ran nothing the trace shows while an op already
    launched waited: before each busy stretch, from the later of the previous
    stretch's end and the first op's launch, to the stretch's start."""
    dev = tables.device
    seg_s, seg_e, first = union(dev.start[on], dev.end[on])
    if not len(seg_s):
        return 0
    idx = on[first]
    known = launched[idx]
    prev_end = np.concatenate(([np.iinfo(np.int64).min], seg_e[:-1]))
    ready = np.maximum(prev_end, launch_end[idx])
    gap = np.where(known, seg_s - ready, 0)
    return int(max(0, gap.max()))


#: A device idle this long with launched work waiting is not launch latency (microseconds).
QUEUED_IDLE_NS = 1_000_000


def work_notes(work: DeviceWork | None) -> list[Note]:
    """What the numbers over the device's own timeline rest on."""
    if work is None:
        return []
    notes: list[Note] = []
    moved = work.on_device
    if moved:
        # one row per device and step, the steps in the same order on every device
        steps = len(work.steps) // max(1, len(work.clocks))
        places = {k % steps for k, s in enumerate(work.steps) if s.window == DEVICE}
        after = max(s.after_ns for s in moved)
        text = (
            f"{len(places)} of {steps} steps ran device work outside their"
            f" host span (up to {human_time(after)} after it): their idle, utilization and"
            " breakdown are measured over that work's own span on the device (the step"
            " times are still their host spans)"
        )
        notes.append(Note("device-window", text, {"steps": len(places), "after_ns": after}))
    for c in work.clocks:
        if c.disagree:
            text = (
                f"device {c.device}: {c.before_launch} of {c.launched} ops start before their"
                f" launch call began (by up to {human_time(c.lead_ns)}): the host's and the"
                " device's clocks disagree, so launch delays are unreliable and the device's"
                " own timeline is used for its idle time"
            )
            data = {"device": c.device, "ops": c.before_launch, "lead_ns": c.lead_ns}
            notes.append(Note("clocks-disagree", text, data))
        if c.queued_idle_ns >= QUEUED_IDLE_NS:
            text = (
                f"device {c.device} shows nothing running for {human_time(c.queued_idle_ns)}"
                " while work it had been launched waited: the host's and the device's clocks"
                " disagree by about that much, or the device ran or waited on work this trace"
                " does not show"
            )
            data = {"device": c.device, "queued_idle_ns": c.queued_idle_ns}
            notes.append(Note("queued-idle", text, data))
    return notes
