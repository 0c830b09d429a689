"""The device's peak FLOP/s and bytes/s for the run's dtype: given, looked up, or measured.

* ``--peak FLOPS[,BYTES]`` (``2.5T``, ``312e12,2.0T``) gives the rates; a rate
  left out is found as below.
* CUDA: the table of known GPUs by name (``layerprof.capture.flops.gpus``).
* CPU: a short measurement at start - the best of a few square matmuls in the
  run's dtype (2·n³ FLOPs each) and of a few copies of a 32 MiB tensor (read +
  write), with the run's thread count - cached per machine, dtype and thread
  count in the user cache directory (``$LAYERPROF_CACHE_DIR``, else
  ``$XDG_CACHE_HOME/layerprof`` or the platform's own), so it runs once.

A measured peak is what this machine reaches with torch's own kernels, not a
datasheet figure: a layer can approach 100 % of it, and a busy machine measures low.
A measurement made while the load average left fewer CPUs idle than the run's threads
is measured again on later runs (at once when the machine is quiet, else up to three
times), the best kept, and its detail says the machine was busy; so is one below what
fewer threads reached. Delete the cache file to measure again, or give ``--peak``.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from layerprof.capture.flops.gpus import DeviceQuery, gpu_peak
from layerprof.capture.options import GivenPeak
from layerprof.capture.platform.hostload import host_load
from layerprof.errors import LayerprofError
from layerprof.files import write_atomic
from layerprof.pivot.sections.flops import Peak

_CACHE_SCHEMA = "layerprof.peaks/1"
_CACHE_FILE = "peaks.json"
MAX_CACHE_BYTES = 1 << 20
_MATMUL_N = {"float32": 1024, "float64": 768}  # other dtypes: 512 (slow on many CPUs)
COPY_BYTES = 32 << 20
_REPS = 10
_BUDGET_S = 0.5  # per measurement: stop repeating once it has taken this long


def device_peak(
    device: str,
    dtype: str,
    threads: int,
    *,
    given: GivenPeak | None = None,
    query: DeviceQuery | None = None,
    measure: Callable[[str, int], Peak] | None = None,
) -> Peak:
    """The peak for a run on ``device`` in ``dtype`` with ``threads`` CPU threads."""
    if given is not None and given.bytes_per_s is not None:
        return Peak(given.flops_per_s, given.bytes_per_s, "given", "--peak")
    if device.startswith("cuda"):
        found = gpu_peak(device, dtype, query)
    else:
        try:
            found = (measure or cached_cpu_peak)(dtype, threads)
        except Exception as exc:  # a dtype this CPU cannot multiply: no peak, say why
            first = str(exc).splitlines()[0][:100] if str(exc) else type(exc).__name__
            found = Peak(None, None, "measured", f"could not measure this CPU's peak: {first}")
    if given is None:
        return found
    return replace(
        found,
        flops_per_s=given.flops_per_s,
        source="given",
        detail=f"--peak for FLOP/s; bytes/s: {found.source} ({found.detail})",
    )


# ---- CPU: measured once per machine, dtype and thread count ------------------------------


#: Measurements after which a peak measured only on a busy machine is kept as it is.
ENOUGH_MEASUREMENTS = 3


@dataclass(frozen=True)
class _Entry:
    """A cached peak: the best of ``measurements`` measurements; ``busy`` when every one
    ran on a busy machine (``load``: the load average and CPUs then, for the detail)."""

    peak: Peak
    measurements: int = 1
    busy: bool = True  # an entry written before this was recorded: not known to be quiet
    load: str = ""


def cached_cpu_peak(
    dtype: str, threads: int, *, load: Callable[[], dict[str, Any]] | None = None
) -> Peak:
    """This CPU's peak, measured once on a quiet machine and cached. A peak measured
    while the machine was busy (``load()``: the load average and the CPU count) reads
    low, so it is measured again on later runs, up to ``ENOUGH_MEASUREMENTS`` times and
    at once whenever the machine is quiet, keeping the best; its detail says when
    every measurement ran on a busy machine."""
    key = _machine_key(dtype, threads)
    path = cache_dir() / _CACHE_FILE
    entries = _read_cache(path)
    hit = entries.get(key)
    busy, state = _busy((load or host_load)(), threads)
    if hit is not None and not _measure_again(hit, entries, dtype, threads, busy):
        return replace(hit.peak, source="cached", detail=_detail(hit))
    fresh = measure_cpu_peak(dtype, threads)
    entry = _Entry(fresh, 1, busy, state)
    if hit is not None:  # measured again: keep the best of both, a busy machine reads low
        best = max(hit, entry, key=lambda e: e.peak.flops_per_s or 0.0)
        entry = _Entry(
            Peak(
                max(fresh.flops_per_s or 0.0, hit.peak.flops_per_s or 0.0) or None,
                max(fresh.bytes_per_s or 0.0, hit.peak.bytes_per_s or 0.0) or None,
                "measured",
                best.peak.detail,
            ),
            hit.measurements + 1,
            hit.busy and busy,
            best.load if hit.busy and busy else "",
        )
    entries[key] = entry
    _write_cache(path, entries)
    return replace(entry.peak, detail=_detail(entry))


def _busy(state: dict[str, Any], threads: int) -> tuple[bool, str]:
    """Whether other work competes for the CPUs a measurement with ``threads`` threads
    uses: the load average leaves fewer than ``threads`` CPUs idle, by more than one (the
    load counts this process's own recent work too). Unknown (no load average): quiet."""
    cpus, load = state.get("cpus"), state.get("load_avg")
    if not isinstance(cpus, int) or not isinstance(load, (int, float)):
        return False, ""
    return load + threads > cpus + 1, f"load {load:.1f} on {cpus} CPUs"


def _measure_again(
    hit: _Entry, entries: dict[str, _Entry], dtype: str, threads: int, busy_now: bool
) -> bool:
    """A cached peak measured only on a busy machine is measured again while fewer than
    ``ENOUGH_MEASUREMENTS`` were made, and whenever the machine is quiet now; and one
    below what fewer threads reached was measured low (more threads never make a matmul
    slower)."""
    if hit.busy and (not busy_now or hit.measurements < ENOUGH_MEASUREMENTS):
        return True
    fewer = (entries.get(_machine_key(dtype, t)) for t in range(1, threads))
    best = max((e.peak.flops_per_s or 0.0 for e in fewer if e is not None), default=0.0)
    return best > (hit.peak.flops_per_s or 0.0)


def _detail(entry: _Entry) -> str:
    """The measurement's detail, how many it is the best of, and whether every one ran
    on a busy machine (then the peak may read low)."""
    out = entry.peak.detail
    if entry.measurements > 1:
        out += f"; best of {entry.measurements} measurements"
    if entry.busy:
        when = f" ({entry.load})" if entry.load else ""
        out += (
            f"; measured while the machine was busy{when}: the peak may read low, and"
            " shares of it high"
        )
    return out


def _machine_key(dtype: str, threads: int) -> str:
    import torch

    return f"cpu|{cpu_name()}|{socket.gethostname()}|torch {torch.__version__}|{dtype}|{threads}"


def cpu_name() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux), else what platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def measure_cpu_peak(dtype: str, threads: int) -> Peak:
    """Best-of-a-few matmul and copy rates on this CPU, in ``dtype``, with ``threads``."""
    import torch

    dt = getattr(torch, dtype)
    n = _MATMUL_N.get(dtype, 512)
    with torch.inference_mode():
        a = torch.randn(n, n).to(dt)
        b = torch.randn(n, n).to(dt)
        flops = _best_rate(lambda: torch.mm(a, b), 2 * n**3)
        src = torch.empty(COPY_BYTES // 4, dtype=torch.float32).fill_(1.0)
        dst = torch.empty_like(src)
        bandwidth = _best_rate(lambda: dst.copy_(src), 2 * COPY_BYTES)
    detail = (
        f"measured on {cpu_name()}: {n}x{n} {dtype} matmul, {COPY_BYTES >> 20} MiB copy,"
        f" {threads} thread{'s' if threads != 1 else ''}"
    )
    return Peak(flops, bandwidth, "measured", detail)


def _best_rate(work: Callable[[], Any], amount: float) -> float:
    work()  # warm-up: first-call allocation and dispatch
    best = float("inf")
    spent = 0.0
    for _ in range(_REPS):
        t0 = time.perf_counter()
        work()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        spent += dt
        if spent > _BUDGET_S:
            break
    return amount / max(best, 1e-9)


def cache_dir() -> Path:
    """Where layerprof keeps per-machine facts (``$LAYERPROF_CACHE_DIR`` wins)."""
    own = os.environ.get("LAYERPROF_CACHE_DIR")
    if own:
        return Path(own)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "layerprof"
    if os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "layerprof" / "Cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "layerprof"


def _read_cache(path: Path) -> dict[str, _Entry]:
    """The cached peaks; a missing, oversized or malformed file is no cache (re-measured)."""
    import orjson

    try:
        if path.stat().st_size > MAX_CACHE_BYTES:
            return {}
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != _CACHE_SCHEMA:
        return {}
    entries = data.get("entries")
    out: dict[str, _Entry] = {}
    for key, value in entries.items() if isinstance(entries, dict) else ():
        entry = _entry_of(value)
        if isinstance(key, str) and entry is not None:
            out[key] = entry
    return out


def _entry_of(value: Any) -> _Entry | None:
    if not isinstance(value, dict):
        return None
    flops, bandwidth, detail = (
        value.get("flops_per_s"),
        value.get("bytes_per_s"),
        value.get("detail", ""),
    )
    numbers = all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < 1e20
        for x in (flops, bandwidth)
    )
    if not numbers or not isinstance(detail, str):
        return None
    count, busy, load = value.get("measurements", 1), value.get("busy", True), value.get("load", "")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        count = 1
    peak = Peak(float(cast(float, flops)), float(cast(float, bandwidth)), "measured", detail[:300])
    return _Entry(
        peak,
        min(count, 1_000),
        busy if isinstance(busy, bool) else True,
        load[:100] if isinstance(load, str) else "",
    )


def _write_cache(path: Path, entries: dict[str, _Entry]) -> None:
    """Best effort: a cache that cannot be written only means measuring again next time."""
    import orjson

    data = {
        "schema": _CACHE_SCHEMA,
        "entries": {
            key: {
                "flops_per_s": e.peak.flops_per_s,
                "bytes_per_s": e.peak.bytes_per_s,
                "detail": e.peak.detail,
                "measurements": e.measurements,
                "busy": e.busy,
                "load": e.load,
            }
            for key, e in entries.items()
        },
    }
    try:
        write_atomic(path, orjson.dumps(data, option=orjson.OPT_INDENT_2))
    except (OSError, LayerprofError):  # read-only home, full disk: measured again next time
        return
