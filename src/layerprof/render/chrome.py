"""Chrome/Perfetto trace and TensorBoard trace directory of an ops-mode Profile.

The Kineto events are kept as torch wrote them, except the ``layer:{path}``
ranges our hooks opened: those move to a track of their own (a process named
``layers``, one thread lane per source thread, sorted first) under the layer
path as name, so Perfetto and chrome://tracing show layer lanes above the
ops, and trace readers do not mistake them for operators.

``torch.profiler`` writes ``ProfilerStep#N`` spans only when it runs with a
``schedule``; for a capture without one, one ``ProfilerStep#N`` span per
profiled iteration is added on the thread that ran the model, as torch would
have written it: from the iteration's first layer range to the end of the
last host event before the next iteration (backward and loss included).

The top level gains ``"layerprof": {"version", "model", "run", "module_types"}``
(``run``: the run's dtype, torch, inputs, threads, mode, grad, host;
``module_types``: every module path -> class name, in module order), which
``layerprof analyze`` uses to say the trace came from layerprof and to
rebuild the run's layer table, never-called containers included.
"""

from __future__ import annotations

import bisect
import gzip
import math
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from layerprof.errors import UsageError
from layerprof.files import write_atomic
from layerprof.traceformat import (
    EVENTS_KEY,
    LAYER_CATEGORY,
    LAYER_RANGE,
    MODULE_TYPES_KEY,
    SOURCE_PID,
    SOURCE_TID,
    STEP_PREFIX,
    USER_ANNOTATION,
)
from layerprof.version import __version__

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile

_MARKER_KEY = "layerprof"


def write_chrome_trace(path: str | os.PathLike[str], profile: Profile) -> Path:
    """Write the trace (+ layer lanes) as ``.json``, or gzipped when the name ends in ``.gz``."""
    return write_atomic(path, trace_bytes(profile, gzip_it=str(path).endswith(".gz")))


def trace_bytes(profile: Profile, *, gzip_it: bool = False) -> bytes:
    """The trace of an ops-mode profile (its recorded events plus layer lanes) as JSON bytes."""
    data = orjson.dumps(_trace_document(profile))
    return gzip.compress(data, mtime=0) if gzip_it else data


def write_tensorboard_dir(
    directory: str | os.PathLike[str],
    profile: Profile,
    *,
    worker: str | None = None,
    use_gzip: bool = False,
) -> Path:
    """One ``{worker}.{time_ns}.pt.trace.json[.gz]`` file, as ``tensorboard_trace_handler`` names it."""
    worker = worker or f"{socket.gethostname()}_{os.getpid()}"
    name = f"{worker}.{time.time_ns()}.pt.trace.json" + (".gz" if use_gzip else "")
    return write_chrome_trace(Path(directory) / name, profile)


def _trace_document(profile: Profile) -> dict[str, Any]:
    """The whole Chrome-trace JSON object: Kineto metadata, kept events, layer lanes."""
    recorded = profile.events
    if recorded is None:
        raise UsageError(
            "a Chrome/Perfetto trace needs the recorded operators", hint="profile with --ops"
        )
    kept, layers = _split_layer_events(recorded.trace_events)
    names = _layer_names(profile)
    doc = dict(recorded.trace_metadata())
    doc[_MARKER_KEY] = marker(profile)
    steps = [] if _has_steps(kept) else _step_spans(kept, layers)
    doc[EVENTS_KEY] = kept + steps + _layer_lanes(layers, names, _free_pid(kept))
    return doc


def marker(profile: Profile | None) -> dict[str, Any]:
    """The top-level ``"layerprof"`` object: who wrote the trace, for which model."""

    out: dict[str, Any] = {"version": __version__, "model": None}
    if profile is not None:
        out["model"] = profile.meta.model or next(
            (i.type for i in profile.layers if i.path == ""), None
        )
        m = profile.meta
        out["run"] = {
            "dtype": m.dtype,
            "torch": m.torch,
            "inputs": list(m.inputs),
            "threads": m.threads,
            "mode": m.mode,
            "grad": m.grad,
            "host": m.host,
        }
        out[MODULE_TYPES_KEY] = {info.path: info.type for info in profile.layers}
    return out


def _has_steps(events: Sequence[dict[str, Any]]) -> bool:
    return any(
        ev.get("ph") == "X" and str(ev.get("name", "")).startswith(STEP_PREFIX) for ev in events
    )


def _step_spans(
    kept: Sequence[dict[str, Any]], layers: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One ``ProfilerStep#N`` span per iteration (outermost layer range) on the model's thread.

    Step ``k`` starts with iteration ``k``'s outermost layer range and ends
    with the last host event of that process starting before iteration
    ``k + 1`` (its loss and backward ops, on any thread), never after it.
    """
    if not layers:
        return []
    first = min(layers, key=lambda ev: ev["ts"])
    pid, tid = first.get("pid"), first.get("tid")
    starts: list[float] = []
    end = -math.inf
    for ev in sorted(
        (e for e in layers if e.get("pid") == pid and e.get("tid") == tid),
        key=lambda e: (e["ts"], -e["dur"]),
    ):
        if ev["ts"] >= end:  # not inside the previous outermost range: a new iteration
            starts.append(ev["ts"])
            end = ev["ts"] + ev["dur"]
    ends = [ev["ts"] + ev.get("dur", 0) for ev in layers if ev.get("pid") == pid]
    host = sorted(
        (ev["ts"], ev["ts"] + (ev.get("dur") or 0))
        for ev in kept
        if ev.get("ph") == "X" and ev.get("pid") == pid and isinstance(ev.get("ts"), (int, float))
    )
    out: list[dict[str, Any]] = []
    for k, start in enumerate(starts):
        nxt = starts[k + 1] if k + 1 < len(starts) else math.inf
        lo = bisect.bisect_left(host, (start, -math.inf))
        hi = bisect.bisect_left(host, (nxt, -math.inf))
        stop = max((e for _, e in host[lo:hi]), default=start)
        stop = max([stop, *(e for e in ends if start <= e <= nxt)])
        stop = min(stop, nxt)
        out.append(
            {
                "ph": "X",
                "cat": USER_ANNOTATION,
                "name": f"{STEP_PREFIX}{k}",
                "pid": pid,
                "tid": tid,
                "ts": start,
                "dur": round(stop - start, 3),
                "args": {"layerprof": "one profiled iteration (no torch.profiler schedule)"},
            }
        )
    return out


def _split_layer_events(
    events: Sequence[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(other events, our ``layer:`` spans)."""
    kept: list[dict[str, Any]] = []
    layers: list[dict[str, Any]] = []
    for ev in events:
        name = ev.get("name")
        if ev.get("ph") == "X" and isinstance(name, str) and name.startswith(LAYER_RANGE):
            layers.append(ev)
        else:
            kept.append(ev)
    return kept, layers


def _layer_lanes(
    spans: Sequence[dict[str, Any]], names: dict[str, str], pid: int
) -> list[dict[str, Any]]:
    """Layer spans on process ``pid`` ("layers"), one lane per source thread, plus M events."""
    lanes: dict[Any, int] = {}
    out: list[dict[str, Any]] = [
        _meta("process_name", pid, None, {"name": "layers"}),
        _meta("process_sort_index", pid, None, {"sort_index": -1}),
    ]
    for ev in spans:
        source = (ev.get("pid"), ev.get("tid"))
        if source not in lanes:
            lanes[source] = len(lanes) + 1
        path = ev["name"][len(LAYER_RANGE) :]
        out.append(
            {
                "ph": "X",
                "cat": LAYER_CATEGORY,
                "name": names.get(path, path),
                "pid": pid,
                "tid": lanes[source],
                "ts": ev["ts"],
                "dur": ev["dur"],
                "args": {"path": path, SOURCE_PID: source[0], SOURCE_TID: source[1]},
            }
        )
    for (_, src_tid), lane in lanes.items():
        label = "layers" if len(lanes) == 1 else f"layers (thread {src_tid})"
        out.append(_meta("thread_name", pid, lane, {"name": label}))
        out.append(_meta("thread_sort_index", pid, lane, {"sort_index": lane}))
    return out


def _meta(name: str, pid: int, tid: int | None, args: dict[str, Any]) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "M", "name": name, "pid": pid, "args": args}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _free_pid(events: Sequence[dict[str, Any]]) -> int:
    """A numeric pid no kept event uses (Kineto pids are the OS pid and small device ids)."""
    used = [ev["pid"] for ev in events if isinstance(ev.get("pid"), int)]
    return max(used, default=0) + 1


def _layer_names(profile: Profile | None) -> dict[str, str]:
    """Span names: the path, and the model's class for the root (whose path is "")."""
    names = {"": "(root)"}
    if profile is not None:
        for info in profile.layers:
            if info.path == "":
                names[""] = info.type
    return names
