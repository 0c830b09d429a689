"""Device queues and launches: how far ahead the host ran, and where it waited.

* **Queue length** of a stream: device ops launched but not yet started. It
  rises by one at each launch call's start and falls by one when that op
  starts (HTA's definition). An op whose start precedes its launch call's
  (CPU and GPU clocks disagree) leaves the queue at the call instead, so the
  length never goes negative.
* **Full queue**: CUDA blocks a launch call while the stream already holds
  ``QUEUE_LIMIT`` pending ops; ``full_ns`` is the time a stream spent at or
  above it and ``full_launch_ns`` the launch calls made then (host time spent
  blocked). ``sync_ns``: ``cuda_sync`` spans and ``*Synchronize`` calls.
* **Launch-delay outliers**: delay (op start - launch call end) above the
  median + 6 scaled MADs and above ``_MIN_OUTLIER_NS``.
* **Kernels shorter than their launch**: the device finishes the op faster
  than the host issues it; many of them mean the run is launch-bound. A graph
  launch (``cudaGraphLaunch`` / ``hipGraphLaunch``) replays many ops from one
  call, so it counts once, against the sum of its ops (vLLM's decode replay read
  "429 of 434 ops shorter than their launch call" against one ~507 µs launch).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from layerprof.pivot.sections.distributed import LaunchOutlier, Queues, StreamQueue
from layerprof.trace.events import I64, RUNTIME, SYNC, EventTables
from layerprof.trace.intervals import thin
from layerprof.trace.links import Links
from layerprof.trace.replay import GRAPH_LAUNCH

QUEUE_LIMIT = 1024  # pending launches per stream before a launch call blocks (CUDA's default)
_MIN_OUTLIER_NS = 50_000
_MAD_FACTOR = 6.0
_MAX_OUTLIERS = 10
MAX_POINTS = 2000  # per stream series, thinned keeping each bucket's maximum


def queues(tables: EventTables, links: Links) -> Queues | None:
    """Queues per stream and launch diagnostics; None without linked device ops."""
    dev, host = tables.device, tables.host
    linked = np.flatnonzero(links.runtime >= 0)
    if len(linked) == 0:
        return None
    rt = links.runtime[linked]
    launch_at = host.start[rt]
    leave_at = np.maximum(dev.start[linked], launch_at)
    streams = []
    full_launch = 0
    for d, s in sorted(
        set(zip(dev.device[linked].tolist(), dev.stream[linked].tolist(), strict=True))
    ):
        on = (dev.device[linked] == d) & (dev.stream[linked] == s)
        stream, blocked = _stream(d, s, launch_at[on], leave_at[on], host.dur[rt[on]])
        streams.append(stream)
        full_launch += blocked
    delay = dev.start[linked] - host.end[rt]
    threshold = _threshold(delay)
    over = np.flatnonzero(delay > threshold)
    worst = over[np.argsort(-delay[over], kind="stable")][:_MAX_OUTLIERS]
    outliers = tuple(
        LaunchOutlier(
            name=tables.names[int(dev.name[linked[k]])],
            launch_ns=int(launch_at[k]),
            delay_ns=int(delay[k]),
        )
        for k in worst.tolist()
    )
    short, launches = _short(tables, rt, dev.dur[linked])
    sync = np.isin(host.kind, (RUNTIME, SYNC)) & _sync_names(tables)
    return Queues(
        streams=tuple(streams),
        queue_limit=QUEUE_LIMIT,
        sync_ns=int(host.dur[sync].sum()),
        full_launch_ns=full_launch,
        delay_threshold_ns=threshold,
        delay_outliers=len(over),
        outliers=outliers,
        short_kernels=int((short > 0).sum()),
        short_kernel_ns=int(short.sum()),
        kernels=launches.kernels,
        graph_launches=launches.graphs,
        graph_ops=launches.graph_ops,
    )


class _Launches(NamedTuple):
    kernels: int  # launches compared: one per op, one per graph launch
    graphs: int
    graph_ops: int


def _short(tables: EventTables, rt: I64, dur: I64) -> tuple[I64, _Launches]:
    """Per launch compared, the device time it launched when shorter than its call (0
    when not): each op against its own call, a graph launch's ops summed against it."""
    host = tables.host
    ids = [i for i, n in enumerate(tables.names) if GRAPH_LAUNCH.match(n)]
    graph = np.isin(host.name[rt], ids) if ids else np.zeros(len(rt), dtype=bool)
    single = np.where(dur[~graph] < host.dur[rt[~graph]], dur[~graph], 0)
    calls, at = np.unique(rt[graph], return_inverse=True)
    summed = np.bincount(at, weights=dur[graph], minlength=len(calls)).astype(np.int64)
    grouped = np.where(summed < host.dur[calls], summed, 0)
    launches = _Launches(len(single) + len(calls), len(calls), int(graph.sum()))
    return np.concatenate([single, grouped]).astype(np.int64), launches


def _sync_names(tables: EventTables) -> np.ndarray:
    host = tables.host
    ids = [i for i, n in enumerate(tables.names) if "Synchronize" in n]
    out: np.ndarray = (host.kind == SYNC) | np.isin(host.name, ids)
    return out


def _stream(
    device: int, stream: int, enter: I64, leave: I64, call_dur: I64
) -> tuple[StreamQueue, int]:
    """The stream's queue series and summary, and the launch time spent on a full queue."""
    times = np.concatenate([enter, leave])
    step = np.concatenate([np.ones(len(enter), np.int64), -np.ones(len(leave), np.int64)])
    # at one instant, arrivals before departures: the maximum is not missed
    order = np.lexsort((-step, times))
    times, length = times[order], np.cumsum(step[order])
    spans = np.diff(times)
    total = int(times[-1] - times[0])
    mean = float((length[:-1] * spans).sum() / total) if total > 0 else 0.0
    full = length[:-1] >= QUEUE_LIMIT
    # the queue length each launch call saw: the value just before its own arrival
    seen = length[np.searchsorted(times, enter, side="left") - 1].clip(0)
    seen[np.searchsorted(times, enter, side="left") == 0] = 0
    blocked = int(call_dur[seen >= QUEUE_LIMIT].sum())
    return (
        StreamQueue(
            device=device,
            stream=stream,
            ops=len(enter),
            max_length=int(length.max()),
            mean_length=mean,
            full_ns=int(spans[full].sum()),
            series=thin(times, length, MAX_POINTS),
        ),
        blocked,
    )


def _threshold(delay: I64) -> int:
    """Median + MAD_FACTOR scaled MADs, at least MIN_OUTLIER_NS above zero."""
    if len(delay) == 0:
        return _MIN_OUTLIER_NS
    median = float(np.median(delay))
    mad = 1.4826 * float(np.median(np.abs(delay - median)))
    return int(max(median + _MAD_FACTOR * mad, _MIN_OUTLIER_NS))
