"""The values a history holds: what one run brings in, and a run read back.

A run is one profile (or one process of a ``run --repeat``) of one commit in one
environment. Times are integer nanoseconds; a spread is the median absolute
deviation over the profile's iterations (None where the profile kept none).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass

from layerprof.errors import LayerprofError


class HistoryError(LayerprofError):
    """A history database that cannot be used: missing, foreign, damaged or too new."""


@dataclass(frozen=True)
class Environment:
    """What must be equal for two runs to be compared: the model, the machine (its
    host name), the device, torch, the dtype and the inputs."""

    model: str
    machine: str
    device: str
    torch: str
    dtype: str
    inputs: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """A short stable name of the environment (12 hex digits of a SHA-256)."""
        text = json.dumps(
            [self.model, self.machine, self.device, self.torch, self.dtype, list(self.inputs)]
        )
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def describe(self) -> str:
        inputs = "; ".join(self.inputs) or "?"
        return (
            f"{self.model or '?'} on {self.machine or '?'} ({self.device}, torch"
            f" {self.torch or '?'}, {self.dtype}, inputs {inputs})"
        )


@dataclass(frozen=True)
class LayerPoint:
    """One layer's medians in one run (ns per forward) and their spreads."""

    path: str
    self_ns: int
    total_ns: int
    self_spread_ns: int | None = None
    total_spread_ns: int | None = None
    device_self_ns: int | None = None
    device_total_ns: int | None = None
    device_self_spread_ns: int | None = None
    device_total_spread_ns: int | None = None


@dataclass(frozen=True)
class Figure:
    """A run-level figure: ``latency``, a generate's ``generate.ttft`` or
    ``phase.decode``, a training loop's ``loop.step`` or ``loop.backward``..."""

    name: str
    median_ns: int
    spread_ns: int | None = None
    n: int | None = None


@dataclass(frozen=True)
class RunEntry:
    """What one run brings into a history. ``when_ns`` orders the runs (ns since the
    epoch, UTC); ``process`` numbers the processes of one ``run --repeat``."""

    commit: str
    env: Environment
    when_ns: int
    branch: str | None = None
    source: str | None = None
    process: int | None = None
    figures: tuple[Figure, ...] = ()
    layers: tuple[LayerPoint, ...] = ()
    latency_samples_ns: tuple[int, ...] | None = None


@dataclass(frozen=True)
class StoredRun:
    """A run as the history holds it, without its numbers."""

    id: int
    commit: str
    branch: str | None
    when_ns: int
    env_key: str
    source: str | None = None
    process: int | None = None

    @property
    def short(self) -> str:
        """The commit as people write it (the first 10 characters)."""
        return self.commit[:10]


@dataclass(frozen=True)
class StoredEnvironment:
    """An environment of a history, how many runs it has and when the newest ran."""

    env: Environment
    runs: int
    newest_ns: int


def iso_time(when_ns: int) -> str:
    """ns since the epoch -> ISO 8601 UTC, to the second."""
    moment = dt.datetime.fromtimestamp(when_ns / 1e9, tz=dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
