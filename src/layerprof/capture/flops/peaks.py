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
datasheet figure: a layer can approach 100 % of it, and a busy machine
measures low (the first measurement is kept, unless it is below what fewer threads
reached, which is measured again and the best kept; delete the cache file to measure
again, or give ``--peak``).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from layerprof.capture.flops.gpus import DeviceQuery, gpu_peak
from layerprof.capture.options import GivenPeak
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


def cached_cpu_peak(dtype: str, threads: int) -> Peak:
    key = _machine_key(dtype, threads)
    path = cache_dir() / _CACHE_FILE
    entries = _read_cache(path)
    hit = entries.get(key)
    if hit is not None and not _measured_low(hit, entries, dtype, threads):
        return replace(hit, source="cached")
    peak = measure_cpu_peak(dtype, threads)
    if hit is not None:  # measured again: keep the best of both, a busy machine reads low
        peak = Peak(
            max(peak.flops_per_s or 0.0, hit.flops_per_s or 0.0) or None,
            max(peak.bytes_per_s or 0.0, hit.bytes_per_s or 0.0) or None,
            "measured",
            peak.detail,
        )
    entries[key] = peak
    _write_cache(path, entries)
    return peak


def _measured_low(hit: Peak, entries: dict[str, Peak], dtype: str, threads: int) -> bool:
    """A cached rate below what fewer threads reached on this machine was measured while
    the machine was busy (more threads never make a matmul slower): measure it again."""
    fewer = (entries.get(_machine_key(dtype, t)) for t in range(1, threads))
    best = max((p.flops_per_s or 0.0 for p in fewer if p is not None), default=0.0)
    return best > (hit.flops_per_s or 0.0)


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


def _read_cache(path: Path) -> dict[str, Peak]:
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
    out: dict[str, Peak] = {}
    for key, value in entries.items() if isinstance(entries, dict) else ():
        peak = _peak_of(value)
        if isinstance(key, str) and peak is not None:
            out[key] = peak
    return out


def _peak_of(value: Any) -> Peak | None:
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
    return Peak(float(cast(float, flops)), float(cast(float, bandwidth)), "measured", detail[:300])


def _write_cache(path: Path, entries: dict[str, Peak]) -> None:
    """Best effort: a cache that cannot be written only means measuring again next time."""
    import orjson

    data = {
        "schema": _CACHE_SCHEMA,
        "entries": {
            key: {"flops_per_s": p.flops_per_s, "bytes_per_s": p.bytes_per_s, "detail": p.detail}
            for key, p in entries.items()
        },
    }
    try:
        write_atomic(path, orjson.dumps(data, option=orjson.OPT_INDENT_2))
    except (OSError, LayerprofError):  # read-only home, full disk: measured again next time
        return
