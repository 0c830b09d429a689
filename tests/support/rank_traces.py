"""Many ranks from one real trace: copies with rewritten rank ids and jittered times.

``simulate_ranks`` is what tests and ``benchmarks/many_ranks.py`` use: rank
``r``'s copy has ``distributedInfo.rank = r``, every timestamp shifted by a
per-rank offset and stretched by a per-rank factor (so nesting is kept and
step times differ between ranks, as a slow rank's do). ``KillOnce`` /
``KillAlways`` wrap a per-rank function so that its worker process dies.
"""

from __future__ import annotations

import gzip
import os
import random
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson


def cpu_trace(path: Path, steps: int = 3) -> Path:
    """A real torch.profiler CPU trace of a small model (ProfilerStep spans, modules)."""
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            with torch.profiler.record_function("train_step"):
                model(x).sum().backward()
            prof.step()
    prof.export_chrome_trace(str(path))
    return path


def simulate_ranks(
    source: Path, folder: Path, n: int, *, seed: int = 0, gz: bool = True, level: int = 1
) -> list[Path]:
    """``n`` copies of ``source`` as ranks 0..n-1 (``trace.rank-R.json[.gz]`` in ``folder``)."""
    raw = source.read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc["traceEvents"]
    t0 = min(e["ts"] for e in events if isinstance(e.get("ts"), (int, float)))
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for rank in range(n):
        offset = rng.uniform(0, 50.0)  # µs: ranks start their steps at different times
        scale = 1.0 + rng.uniform(0, 0.05) + (0.1 if rank == n - 1 else 0.0)  # one slow rank
        copy = dict(doc)
        copy["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank}
        copy["traceEvents"] = [_jittered(e, t0, offset, scale) for e in events]
        data = orjson.dumps(copy)
        name = f"trace.rank-{rank}.json" + (".gz" if gz else "")
        path = folder / name
        path.write_bytes(gzip.compress(data, compresslevel=level) if gz else data)
        out.append(path)
    return out


def _jittered(e: Any, t0: float, offset: float, scale: float) -> Any:
    if not isinstance(e, dict) or not isinstance(e.get("ts"), (int, float)):
        return e
    e = dict(e)
    e["ts"] = t0 + (e["ts"] - t0) * scale + offset
    if isinstance(e.get("dur"), (int, float)):
        e["dur"] = e["dur"] * scale
    return e


@dataclass(frozen=True)
class KillOnce:
    """``fn(item)``, except that the first call on ``victim`` kills its own process
    (SIGKILL: no clean-up, as the OOM killer does); ``marker`` remembers it did."""

    fn: Callable[[Any], Any]
    victim: str
    marker: str

    def __call__(self, item: Any) -> Any:
        if self.victim in str(item) and not os.path.exists(self.marker):
            Path(self.marker).write_text("killed")
            os.kill(os.getpid(), signal.SIGKILL)
        return self.fn(item)


@dataclass(frozen=True)
class KillAlways:
    """``fn(item)``, except that every call on ``victim`` kills its process."""

    fn: Callable[[Any], Any]
    victim: str

    def __call__(self, item: Any) -> Any:
        if self.victim in str(item):
            os.kill(os.getpid(), signal.SIGKILL)
        return self.fn(item)
