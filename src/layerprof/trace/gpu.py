"""GPU side: busy/idle per device, kernels, kernel kinds, memcpy, launch overhead.

* busy = length of the union of a device's kernel, memcpy and memset
  intervals (all streams), over the whole file;
* window = union of the step windows (or the whole trace without steps), per
  device: a step whose device work ran outside its host span is measured over
  that work's own span on the device (``trace/stepwork.py``);
  idle = window - busy inside it; utilization = busy inside / window;
* every idle piece inside the window is classified by the device op that
  ends it: *host wait* when that op's launch call ended after the GPU went
  idle (the GPU waited for the CPU), *short gap* when it was launched in
  time and the gap is at most ``SHORT_GAP_NS``, *other* otherwise
  (dependencies, syncs, or no following op).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from layerprof.pivot.sections.trace import (
    DeviceUse,
    KernelRow,
    KindRow,
    Launches,
    MemcpyRow,
    RuntimeRow,
)
from layerprof.stats import Summary
from layerprof.trace.columns import unique
from layerprof.trace.events import I64, KERNEL, MEMCPY, MEMSET, RUNTIME, SYNC, EventTables
from layerprof.trace.links import Links

SHORT_GAP_NS = 10_000
_MEMCPY_KIND = re.compile(r"Memcpy\s+(\w+)")
_COMM_WORDS = r"nccl|rccl|c10d|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"
_COMM = re.compile(_COMM_WORDS, re.I)
# The same on lower-cased ASCII text: for an ASCII name it gives what _COMM gives,
# about 70x sooner on a templated kernel name of a thousand characters (re.I's
# per-character folding); a name with other characters takes _COMM.
_COMM_ASCII = re.compile(_COMM_WORDS)


def summary(values: I64) -> Summary | None:
    """Summary.of computed by numpy (same linear percentiles), for 10^5 values."""
    if len(values) == 0:
        return None
    v = values.astype(np.float64)
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return Summary(
        median=float(p50),
        mean=float(v.mean()),
        p90=float(p90),
        p99=float(p99),
        min=float(v.min()),
        max=float(v.max()),
        std=float(v.std(ddof=1)) if len(v) > 1 else 0.0,
        n=len(v),
    )


def union(starts: I64, ends: I64) -> tuple[I64, I64, I64]:
    """Disjoint sorted segments covering the intervals, and each segment's first index."""
    if len(starts) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], run[last], order[first]


def overlap(seg_s: I64, seg_e: I64, windows: list[tuple[int, int]]) -> int:
    """Total length of the segments inside the (disjoint) windows."""
    total = 0
    for lo, hi in windows:
        total += int(np.clip(np.minimum(seg_e, hi) - np.maximum(seg_s, lo), 0, None).sum())
    return total


def _merge_windows(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(windows):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        elif hi > lo:
            out.append((lo, hi))
    return out


def device_use(
    tables: EventTables,
    links: Links,
    windows: list[tuple[int, int]],
    per_device: Mapping[int, list[tuple[int, int]]] | None = None,
) -> tuple[DeviceUse, ...]:
    """Busy and idle per device over ``windows``, or over a device's own windows in
    ``per_device`` (its steps' work, ``trace/stepwork.py``) where it has them."""
    dev, host = tables.device, tables.host
    launch_end = np.full(len(dev), -1, dtype=np.int64)
    has_rt = links.runtime >= 0
    launch_end[has_rt] = host.end[links.runtime[has_rt]]
    out = []
    for d in unique(dev.device).tolist():
        mine = _merge_windows((per_device or {}).get(int(d), windows))
        window_ns = sum(hi - lo for lo, hi in mine)
        on = np.flatnonzero(dev.device == d)
        seg_s, seg_e, first = union(dev.start[on], dev.end[on])
        busy_in = overlap(seg_s, seg_e, mine)
        wait, short, other = _classify_idle(seg_s, seg_e, launch_end[on][first], mine)
        kinds = dev.kind[on]
        durs = dev.dur[on]
        out.append(
            DeviceUse(
                device=int(d),
                busy_ns=int((seg_e - seg_s).sum()),
                busy_in_window_ns=busy_in,
                window_ns=window_ns,
                idle_ns=window_ns - busy_in,
                utilization=busy_in / window_ns if window_ns > 0 else 0.0,
                kernel_ns=int(durs[kinds == KERNEL].sum()),
                memcpy_ns=int(durs[kinds == MEMCPY].sum()),
                memset_ns=int(durs[kinds == MEMSET].sum()),
                streams=len(unique(dev.stream[on])),
                host_wait_ns=wait,
                short_gap_ns=short,
                other_idle_ns=other,
            )
        )
    return tuple(out)


def _classify_idle(
    seg_s: I64, seg_e: I64, launched: I64, windows: list[tuple[int, int]]
) -> tuple[int, int, int]:
    """Split idle time inside the windows into host wait / short gap / other.

    The gap before each busy segment (from the window's start or the previous
    segment's end) is host wait when the segment's first op was launched after
    that gap began, else a short gap up to ``SHORT_GAP_NS``, else other; the
    time after the last segment is other. Segments are disjoint and sorted.
    """
    wait = short = other = 0
    for lo, hi in windows:
        inside = np.flatnonzero((seg_e > lo) & (seg_s < hi))
        if len(inside) == 0:
            other += max(0, hi - lo)
            continue
        ends = np.minimum(seg_e[inside], hi)  # each one's end, and the next one's prev_end
        prev_end = np.concatenate(([lo], ends[:-1]))
        gap = np.maximum(seg_s[inside], lo) - prev_end
        waited = launched[inside] > prev_end
        wait += int(gap[(gap > 0) & waited].sum())
        short += int(gap[(gap > 0) & ~waited & (gap <= SHORT_GAP_NS)].sum())
        other += int(gap[(gap > SHORT_GAP_NS) & ~waited].sum())
        other += max(0, hi - int(ends[-1]))
    return wait, short, other


def kernel_kind(name: str, device_kind: int) -> str:
    if device_kind in (MEMCPY, MEMSET):
        return "memory"
    found = _COMM_ASCII.search(name.lower()) if name.isascii() else _COMM.search(name)
    if found:
        return "communication"
    return "compute"


def kernel_table(tables: EventTables) -> tuple[KernelRow, ...]:
    dev = tables.device
    idx = np.flatnonzero(dev.kind == KERNEL)
    if len(idx) == 0:
        return ()
    names = dev.name[idx]
    durs = dev.dur[idx]
    uniq, group = np.unique(names, return_inverse=True)
    k = len(uniq)
    calls = np.bincount(group, minlength=k)
    total = np.bincount(group, weights=durs, minlength=k).astype(np.int64)
    lo = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.zeros(k, dtype=np.int64)
    np.minimum.at(lo, group, durs)
    np.maximum.at(hi, group, durs)
    rows = []
    for g, name_id in enumerate(uniq.tolist()):
        name = tables.names[name_id]
        rows.append(
            KernelRow(
                name=name,
                kind=kernel_kind(name, KERNEL),
                calls=int(calls[g]),
                total_ns=int(total[g]),
                min_ns=int(lo[g]),
                max_ns=int(hi[g]),
            )
        )
    rows.sort(key=lambda r: (-r.total_ns, r.name))
    return tuple(rows)


def kind_table(tables: EventTables, kernels: tuple[KernelRow, ...]) -> tuple[KindRow, ...]:
    acc: dict[str, list[int]] = {}
    for row in kernels:
        a = acc.setdefault(row.kind, [0, 0])
        a[0] += row.calls
        a[1] += row.total_ns
    mem = np.isin(tables.device.kind, (MEMCPY, MEMSET))
    if mem.any():
        a = acc.setdefault("memory", [0, 0])
        a[0] += int(mem.sum())
        a[1] += int(tables.device.dur[mem].sum())
    rows = [KindRow(kind, calls, total) for kind, (calls, total) in acc.items()]
    return tuple(sorted(rows, key=lambda r: -r.total_ns))


def memcpy_table(tables: EventTables) -> tuple[MemcpyRow, ...]:
    dev = tables.device
    idx = np.flatnonzero(np.isin(dev.kind, (MEMCPY, MEMSET)))
    acc: dict[str, list[int]] = {}
    names = tables.names
    for kind, name_id, dur, nbytes in zip(
        dev.kind[idx].tolist(),
        dev.name[idx].tolist(),
        dev.dur[idx].tolist(),
        dev.bytes[idx].tolist(),
        strict=True,
    ):
        if kind == MEMSET:
            label = "Memset"
        else:
            m = _MEMCPY_KIND.search(names[name_id])
            label = m.group(1) if m else names[name_id]  # e.g. MTIA's dma_request
        a = acc.setdefault(label, [0, 0, 0])
        a[0] += 1
        a[1] += dur
        a[2] += max(nbytes, 0)
    rows = [MemcpyRow(k, c, t, b) for k, (c, t, b) in acc.items()]
    return tuple(sorted(rows, key=lambda r: -r.total_ns))


def launches(tables: EventTables, links: Links) -> Launches:
    host, dev = tables.host, tables.device
    matched = links.runtime >= 0
    rt = links.runtime[matched]
    delay = dev.start[matched] - host.end[rt]
    runtime_idx = np.flatnonzero(host.kind == RUNTIME)
    rows: tuple[RuntimeRow, ...] = ()
    if len(runtime_idx):
        uniq, group = np.unique(host.name[runtime_idx], return_inverse=True)
        calls = np.bincount(group, minlength=len(uniq))
        total = np.bincount(group, weights=host.dur[runtime_idx], minlength=len(uniq))
        rows = tuple(
            sorted(
                (
                    RuntimeRow(tables.names[int(n)], int(c), int(t))
                    for n, c, t in zip(uniq.tolist(), calls.tolist(), total.tolist(), strict=True)
                ),
                key=lambda r: -r.total_ns,
            )
        )
    sync = int(host.dur[host.kind == SYNC].sum()) + sum(
        r.total_ns for r in rows if "Synchronize" in r.name
    )
    unique_calls = unique(rt)
    return Launches(
        launches=len(unique_calls),
        call_ns=summary(host.dur[unique_calls]),
        call_total_ns=int(host.dur[unique_calls].sum()),
        delay_ns=summary(delay),
        negative_delays=int((delay < 0).sum()),
        unmatched_device_ops=int((~matched).sum()),
        sync_ns=sync,
        runtime=rows,
    )
