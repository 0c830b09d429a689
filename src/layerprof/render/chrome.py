"""Chrome/Perfetto trace and TensorBoard trace directory from an ops capture.

The Kineto events are kept as torch wrote them, except the ``layer:{path}``
ranges our hooks opened: those move to a track of their own (a process named
``layers``, one thread lane per source thread, sorted first) under the layer
path as name, so Perfetto and chrome://tracing show layer lanes above the
ops, and trace readers do not mistake them for operators.
"""

from __future__ import annotations

import gzip
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from layerprof.files import write_atomic

if TYPE_CHECKING:
    from layerprof.opcapture import OpCapture
    from layerprof.profile import Profile

LAYER_PREFIX = "layer:"
LAYER_CATEGORY = "layerprof_layer"  # unknown to trace readers: never counted as an op


def write_chrome_trace(
    path: str | os.PathLike[str], capture: OpCapture, profile: Profile | None = None
) -> Path:
    """Write the trace (+ layer lanes) as ``.json``, or gzipped when the name ends in ``.gz``."""
    data = orjson.dumps(trace_document(capture, profile))
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    return write_atomic(path, data)


def write_tensorboard_dir(
    directory: str | os.PathLike[str],
    capture: OpCapture,
    profile: Profile | None = None,
    *,
    worker: str | None = None,
    use_gzip: bool = False,
) -> Path:
    """One ``{worker}.{time_ns}.pt.trace.json[.gz]`` file, as ``tensorboard_trace_handler`` names it."""
    worker = worker or f"{socket.gethostname()}_{os.getpid()}"
    name = f"{worker}.{time.time_ns()}.pt.trace.json" + (".gz" if use_gzip else "")
    return write_chrome_trace(Path(directory) / name, capture, profile)


def trace_document(capture: OpCapture, profile: Profile | None = None) -> dict[str, Any]:
    """The whole Chrome-trace JSON object: Kineto metadata, kept events, layer lanes."""
    kept, layers = split_layer_events(capture.trace_events)
    names = _layer_names(profile)
    doc = dict(capture.trace_metadata())
    doc["traceEvents"] = kept + layer_lanes(layers, names, _free_pid(kept))
    return doc


def split_layer_events(
    events: Sequence[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(other events, our ``layer:`` spans)."""
    kept: list[dict[str, Any]] = []
    layers: list[dict[str, Any]] = []
    for ev in events:
        name = ev.get("name")
        if ev.get("ph") == "X" and isinstance(name, str) and name.startswith(LAYER_PREFIX):
            layers.append(ev)
        else:
            kept.append(ev)
    return kept, layers


def layer_lanes(
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
        path = ev["name"][len(LAYER_PREFIX) :]
        out.append(
            {
                "ph": "X",
                "cat": LAYER_CATEGORY,
                "name": names.get(path, path),
                "pid": pid,
                "tid": lanes[source],
                "ts": ev["ts"],
                "dur": ev["dur"],
                "args": {"path": path, "source pid": source[0], "source tid": source[1]},
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
