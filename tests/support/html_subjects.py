"""What the HTML tests render: real producer output (a hooks-mode and an ops-mode profile
of a small model, an analysis of CPU traces torch.profiler writes here, a diff of two
profiles with one layer made slower on purpose, a model whose layer names are hostile),
and a parser that reads the page's tables back.

Producers run once per test session (``functools.cache``): the tests only read them.
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import torch
from torch import nn

import layerprof
from layerprof.analysis.diff import diff
from layerprof.pivot.diff import Diff
from layerprof.pivot.profile import Profile, Run
from layerprof.trace import analyze
from tests.support.diff_subjects import Sleep
from tests.support.readback import assert_shows

EVIL = "</script><script>alert(1)</script>"
HOSTILE_NAMES = (EVIL, "<!--x", "say\"hi'", "bell\x07esc\x1b[31m", "gemm<float, 128>")
HOSTILE_WIDTH = 256


class Net(nn.Module):
    """A stem, a ModuleList of Sequential blocks, a head: paths like ``blocks.1.0``."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(16, 32)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(3))
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Hostile(nn.Module):
    """Layers named with script-closing tags, comment openers, quotes and control characters."""

    def __init__(self) -> None:
        super().__init__()
        # Wide enough that every Linear takes tens of µs: ops mode's correction for its
        # own recording cost, calibrated on a loaded machine, can take a few-µs layer
        # to zero, and the hierarchy chart leaves zero-time blocks out.
        for i, name in enumerate(HOSTILE_NAMES):
            self.add_module(
                name, nn.Linear(HOSTILE_WIDTH, HOSTILE_WIDTH) if i % 2 == 0 else nn.ReLU()
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in self.children():
            x = module(x)
        return x


def _inputs() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(8, 16)


# The measured subjects are saved under tests/data/profiles (scripts/make-test-profiles.py
# measures them again): rendering tests read what a real run wrote, in no time and the
# same on every machine. The measure_* functions are what that script runs.
PROFILES = Path(__file__).resolve().parents[1] / "data" / "profiles"


def saved(name: str) -> Profile:
    return Profile.load(PROFILES / f"{name}.json")


def measure_hooks() -> Profile:
    torch.manual_seed(0)
    return layerprof.profile(Net(), _inputs(), warmup=2, iters=12)


def measure_ops() -> Profile:
    """Ops mode with backward: operators per layer, forward and backward."""
    torch.manual_seed(0)
    return layerprof.profile(Net(), _inputs(), warmup=1, iters=6, ops=True, backward=True)


def measure_hostile() -> Profile:
    torch.manual_seed(0)
    x = torch.randn(64, HOSTILE_WIDTH)
    return layerprof.profile(Hostile(), x, warmup=1, iters=4, ops=True)


def measure_sleepy(us: int) -> Profile:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), Sleep(us), nn.Linear(16, 16))
    return layerprof.profile(model, torch.randn(4, 16), warmup=1, iters=10)


def measure_deep(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Profile:
    """The console-fit subjects: BERT's and ResNet-50's module trees at toy widths."""
    from layerprof.capture.options import RunOptions
    from layerprof.capture.runner import run_model

    torch.manual_seed(0)
    opts = RunOptions(warmup=0, iters=2, model_name=type(model).__name__)
    return run_model(model, inputs, {}, opts)


@functools.cache
def hooks_profile() -> Profile:
    return saved("hooks")


@functools.cache
def ops_profile() -> Profile:
    return saved("ops")


@functools.cache
def hostile_profile() -> Profile:
    return saved("hostile")


@functools.cache
def slow_diff() -> Diff:
    """Layer ``2`` sleeps 1 ms in base and 4 ms in new."""
    return diff(saved("sleep-1ms"), saved("sleep-4ms"))


@functools.cache
def trace_dir() -> Path:
    """Two ranks' CPU traces written by torch.profiler: steps from a schedule, the module
    tree (with_stack), shapes, memory, a record_function region and backward."""
    out = Path(tempfile.mkdtemp(prefix="layerprof-html-"))
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x = torch.randn(4, 16)
    for rank in range(2):
        path = out / f"rank-{rank}.pt.trace.json"
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            with_stack=True,
            record_shapes=True,
            profile_memory=True,
            schedule=torch.profiler.schedule(wait=0, warmup=1, active=3),
            on_trace_ready=lambda p, path=path: p.export_chrome_trace(str(path)),
        ) as prof:
            for _ in range(4):
                with torch.profiler.record_function("train_step"):
                    model(x).sum().backward()
                prof.step()
    return out


@functools.cache
def cpu_run() -> Run:
    return analyze(trace_dir())


@functools.cache
def one_rank_run() -> Run:
    return analyze(trace_dir() / "rank-0.pt.trace.json")


# ---------------------------------------------------------------- reading the page back


@dataclass
class Cell:
    text: str
    v: str | None  # data-v: the number a numeric column sorts by
    tip: str | None  # title attribute


@dataclass
class Table:
    headers: list[str] = field(default_factory=list)
    rows: list[list[Cell]] = field(default_factory=list)

    def column(self, header: str) -> list[Cell]:
        i = self.headers.index(header)
        return [row[i] for row in self.rows]

    def find(self, prefix: str) -> str:
        """The header that starts with ``prefix`` (e.g. ``Self (`` -> ``Self (µs)``)."""
        found = [h for h in self.headers if h.startswith(prefix) and "(" not in h[len(prefix) :]]
        assert len(found) == 1, (prefix, self.headers)
        return found[0]


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, Table] = {}
        self._table: Table | None = None
        self._cell: Cell | None = None
        self._in_th = False
        self._th = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self._table = self.tables.setdefault(str(a["id"]), Table())
        elif self._table is None:
            return
        elif tag == "th":
            self._in_th, self._th = True, ""
        elif tag == "tr" and self._table.headers:
            self._table.rows.append([])
        elif tag == "td":
            self._cell = Cell("", a.get("data-v"), a.get("title"))

    def handle_endtag(self, tag: str) -> None:
        if self._table is None:
            return
        if tag == "th":
            self._table.headers.append(self._th)
            self._in_th = False
        elif tag == "td" and self._cell is not None:
            self._table.rows[-1].append(self._cell)
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._in_th:
            self._th += data
        elif self._cell is not None:
            self._cell.text += data


def tables(page: str) -> dict[str, Table]:
    parser = _Tables()
    parser.feed(page)
    return parser.tables


def chart_data(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="lp-data">(.*?)</script>', page, re.S)
    assert m, "no embedded data element"
    data: dict[str, Any] = json.loads(m.group(1))
    return data


def unit_of(header: str) -> float:
    """The ns per unit a time column's header names: ``Self (µs)`` -> 1000."""
    name = header.rsplit("(", 1)[1].rstrip(")")
    return {"µs": 1e3, "ms": 1e6}[name]


def number(cell: Cell) -> float | None:
    return None if cell.v in (None, "") else float(str(cell.v))


def assert_times(table: Table, prefix: str, values: list[float | None]) -> None:
    """The column shows ``values`` (ns) in its unit and sorts by them exactly."""
    header = table.find(prefix)
    cells = table.column(header)
    assert_shows([c.text for c in cells], values, per=unit_of(header))
    assert [number(c) for c in cells] == [None if v is None else float(v) for v in values]


def section_ids(page: str) -> list[str]:
    return re.findall(r'<section class="card" id="([^"]+)"', page)
