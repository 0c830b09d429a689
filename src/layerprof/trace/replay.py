"""CUDA/HIP graph launches in a replay trace, and the launches a capture trace recorded.

A graph replay is one runtime call (``cudaGraphLaunch`` / ``hipGraphLaunch``)
whose correlation id every kernel of the graph carries: the kernels have no
launch of their own, so no op or module encloses them. The capture trace,
recorded while the engine captured that graph, holds one launch call per
kernel (its name in ``args.kernel``), under the ops and module spans that made
it; those kernels never ran (the stream was capturing). This module finds
both sides in the event tables and aligns them by kernel name
(:func:`align`); ``trace/capturepair.py`` reads the files and merges.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from layerprof.pivot.notes import Note
from layerprof.trace.events import ANNOTATION, I64, KERNEL, MEMCPY, RUNTIME, EventTables

if TYPE_CHECKING:
    from layerprof.pivot.sections.replay import GraphReplay

GRAPH_LAUNCH = re.compile(r"^(?:cuda|hip|cu)GraphLaunch")
_BEGIN_CAPTURE = re.compile(r"^(?:cuda|hip|cu)StreamBeginCapture")
_END_CAPTURE = re.compile(r"^(?:cuda|hip|cu)StreamEndCapture")
_COPY_CALL = re.compile(r"^(?:cuda|hip|cu)Memcpy")
_SET_CALL = re.compile(r"^(?:cuda|hip|cu)Memset")
#: a step annotation's batch: SGLang's ``step[DECODE bs=32]``, the roofline
#: convention's ``execute_{tokens}_...`` (a decode step's tokens are its requests)
_BATCH_HINTS = (re.compile(r"\bbs[=_](\d+)"), re.compile(r"^execute_(\d+)_"))
#: a capture's own annotation (vLLM, SGLang): ``capture_{batch}_{mode}``
CAPTURE_ANNOTATION = re.compile(r"^capture_(\d+)_(\w+)$")
#: what a copy or a fill is called on both sides (a replayed memcpy node is
#: ``Memcpy DtoD (Device -> Device)``, its capture-time call ``hipMemcpyAsync``)
COPY_TOKEN = "(memcpy)"
#: a kernel launch whose call does not name its kernel: matched by position only
UNNAMED_KERNEL = "(kernel)"
_LAUNCH_CALL = re.compile(r"Launch")
SET_TOKEN = "(memset)"


class GraphLaunch(NamedTuple):
    """One graph launch in a replay: its call and the device ops it replayed."""

    host: int  # host row of the launch call
    call: str  # cudaGraphLaunch / hipGraphLaunch
    ops: I64  # device rows carrying its correlation, in start order
    hint: int | None  # a batch size read off an enclosing step annotation


def graph_launches(tables: EventTables) -> list[GraphLaunch]:
    """Every graph launch call of the trace (one with no device op included: it says so)."""
    host, dev = tables.host, tables.device
    names = tables.names
    ids = [i for i, n in enumerate(names) if GRAPH_LAUNCH.match(n)]
    if not ids:
        return []
    rows = np.flatnonzero((host.kind == RUNTIME) & np.isin(host.name, ids))
    if not len(rows):
        return []
    order = np.argsort(dev.corr, kind="stable")
    keys = dev.corr[order]
    hints = _Hints(tables)
    out = []
    for row in sorted(rows.tolist(), key=lambda r: int(host.start[r])):
        corr = int(host.ref[row])
        lo, hi = np.searchsorted(keys, [corr, corr + 1]) if corr >= 0 else (0, 0)
        ops = order[lo:hi]
        ops = ops[np.argsort(dev.start[ops], kind="stable")]
        out.append(GraphLaunch(row, names[int(host.name[row])], ops, hints.at(row)))
    return out


class _Hints:
    """The batch sizes step annotations name, looked up around a launch call."""

    def __init__(self, tables: EventTables) -> None:
        host = tables.host
        rows = np.flatnonzero(host.kind == ANNOTATION)
        batch = [_batch(tables.names[n]) for n in host.name[rows].tolist()]
        named = np.asarray([b is not None for b in batch], dtype=bool)
        self.rows = rows[named]
        self.batch = [b for b in batch if b is not None]
        self.start = host.start[self.rows]
        self.end = self.start + host.dur[self.rows]
        self.host = host

    def at(self, row: int) -> int | None:
        """The batch of the innermost named annotation around host row ``row``."""
        if not len(self.rows):
            return None
        start = self.host.start[row]
        end = start + self.host.dur[row]
        around = np.flatnonzero((self.start <= start) & (self.end >= end))
        if not len(around):
            return None
        return self.batch[int(around[np.argmax(self.start[around])])]


def _batch(name: str) -> int | None:
    for pattern in _BATCH_HINTS:
        found = pattern.search(name)
        if found:
            return int(found.group(1))
    return None


def device_tokens(tables: EventTables, ops: I64) -> list[str]:
    """What each device op is called for the alignment: a kernel by name, a copy or a fill
    by its kind (their names differ between the replay and the capture's calls)."""
    names, kind = tables.names, tables.device.kind
    return [
        names[int(n)] if k == KERNEL else COPY_TOKEN if k == MEMCPY else SET_TOKEN
        for n, k in zip(tables.device.name[ops].tolist(), kind[ops].tolist(), strict=True)
    ]


class CapturedLaunches(NamedTuple):
    """The launches one capture window recorded into its graph, in call order."""

    rows: I64  # host rows of the launch calls
    tokens: tuple[str, ...]  # what each launched (see device_tokens)
    windows: int  # begin..end capture pairs this covers (0: none recorded, the whole trace)
    batch: int | None = None  # from a ``capture_{batch}_{mode}`` annotation around it
    mode: str = ""


def captured_launches(tables: EventTables, kernels: dict[int, str]) -> CapturedLaunches:
    """Every capture window's launches as one sequence (what a capture alone reports)."""
    graphs = captured_graphs(tables, kernels)
    rows = np.concatenate([g.rows for g in graphs]) if graphs else np.zeros(0, dtype=np.int64)
    tokens = tuple(t for g in graphs for t in g.tokens)
    return CapturedLaunches(rows, tokens, sum(g.windows for g in graphs))


def captured_graphs(tables: EventTables, kernels: dict[int, str]) -> list[CapturedLaunches]:
    """One graph per capture window (``*StreamBeginCapture`` to ``*StreamEndCapture``;
    without them, the whole trace is one): the launch calls inside it whose work never
    ran (a launch with a device op of its own ran before or after capturing), in call
    order. ``kernels`` maps a launch call's correlation id to the kernel its
    ``args.kernel`` names. An engine capturing several batch sizes in one trace gives
    one graph each, told apart by its ``capture_{batch}_{mode}`` annotation."""
    host, names = tables.host, tables.names
    runtime = np.flatnonzero(host.kind == RUNTIME)
    call_names = [names[int(n)] for n in host.name[runtime].tolist()]
    rows_list = runtime.tolist()
    begins = sorted(
        int(host.start[r]) for r, n in zip(rows_list, call_names, strict=True)
        if _BEGIN_CAPTURE.match(n)
    )  # fmt: skip
    ends = sorted(
        int(host.end[r]) for r, n in zip(rows_list, call_names, strict=True)
        if _END_CAPTURE.match(n)
    )  # fmt: skip
    last = int(host.end.max()) if len(host) else 0
    windows = [(lo, min((e for e in ends if e >= lo), default=last)) for lo in begins]
    if not windows:
        windows = [(int(host.start.min()) if len(host) else 0, last)]
    ran = set(tables.device.corr.tolist())
    starts = host.start[runtime].tolist()
    out = []
    for lo, hi in windows:
        picked = [
            (start, r, kernels.get(int(host.ref[r])) or _call_token(name))
            for r, name, start in zip(rows_list, call_names, starts, strict=True)
            if lo <= start <= hi and int(host.ref[r]) not in ran
        ]
        picked = sorted((p for p in picked if p[2] is not None), key=lambda p: p[0])
        batch, mode = _window_label(tables, lo)
        out.append(
            CapturedLaunches(
                rows=np.asarray([p[1] for p in picked], dtype=np.int64),
                tokens=tuple(str(p[2]) for p in picked),
                windows=1 if begins else 0,
                batch=batch,
                mode=mode,
            )
        )
    return [g for g in out if len(g.rows)] or out[:1]


def _window_label(tables: EventTables, at: int) -> tuple[int | None, str]:
    """The batch and mode of the innermost ``capture_{batch}_{mode}`` annotation
    enclosing time ``at``, if the engine wrote one."""
    host = tables.host
    around = np.flatnonzero((host.kind == ANNOTATION) & (host.start <= at) & (host.end >= at))
    for i in sorted(around.tolist(), key=lambda i: -int(host.start[i])):
        found = CAPTURE_ANNOTATION.match(tables.names[int(host.name[i])])
        if found:
            return int(found.group(1)), found.group(2)
    return None, ""


def _call_token(name: str) -> str | None:
    """A launch call's token when its args name no kernel (CUDA's runtime events do not)."""
    if _COPY_CALL.match(name):
        return COPY_TOKEN
    if _SET_CALL.match(name):
        return SET_TOKEN
    return UNNAMED_KERNEL if _LAUNCH_CALL.search(name) and not GRAPH_LAUNCH.match(name) else None


def align(replayed: list[str], captured: tuple[str, ...] | list[str]) -> list[tuple[int, int]]:
    """Pairs (replayed index, captured index) of the longest matching blocks of names
    (difflib's SequenceMatcher, no junk heuristic): a kernel dropped from or added to
    either side leaves the rest paired; a name never pairs with another name."""
    # here: difflib (1 ms to import) only for a graph replay read through a capture
    from difflib import SequenceMatcher

    ids: dict[str, int] = {}
    a = [ids.setdefault(t, len(ids)) for t in replayed]
    b = [ids.setdefault(t, len(ids)) for t in captured]
    matcher = SequenceMatcher(None, a, b, autojunk=False)  # type: ignore[arg-type]
    return [
        (block.a + k, block.b + k)
        for block in matcher.get_matching_blocks()
        for k in range(block.size)
    ]


def replay_section(
    tables: EventTables, launches: list[GraphLaunch] | None = None
) -> GraphReplay | None:
    """A replay's graph launches with no capture read (``--capture`` fills the rest):
    what each replayed, so the launch table can say it. None without graph launches."""
    launches = graph_launches(tables) if launches is None else launches
    if not launches:
        return None
    # here: the section's four dataclasses (~6 ms to create) only for a trace that has
    # graph launches, as the sections package loads its modules on first use
    from layerprof.pivot.sections.replay import GraphMatch, GraphReplay

    dev = tables.device
    inside = np.zeros(len(dev), dtype=bool)
    for g in launches:
        inside[g.ops] = True
    return GraphReplay(
        captures=(),
        graphs=tuple(
            GraphMatch(g.call, len(g.ops), int(dev.dur[g.ops].sum()), None, None, g.hint, 0, 0)
            for g in launches
        ),
        missed=(),
        outside_ops=int((~inside).sum()),
        outside_ns=int(dev.dur[~inside].sum()),
    )


def graph_facts(tables: EventTables) -> tuple[GraphReplay | None, list[Note]]:
    """For the reducer: a replay's graph launches (section and note), a capture's note."""
    launches = graph_launches(tables)
    return replay_section(tables, launches), capture_notes(tables)


def capture_notes(tables: EventTables) -> list[Note]:
    """What a capture trace analyzed on its own is: its kernels never ran (a replay's
    graph launches are told by its ``graph_replay`` section instead)."""
    notes: list[Note] = []
    if not any(_BEGIN_CAPTURE.match(n) for n in tables.names):
        return notes  # the common case, decided without a pass over the launches
    captured = captured_launches(tables, {})
    if captured.windows:
        unrun = len(captured.rows)
        notes.append(
            Note(
                "graph-capture",
                f"a CUDA/HIP graph capture ({captured.windows} capture"
                f"{'s' if captured.windows != 1 else ''}): the {unrun} kernels, copies and"
                " fills launched while capturing never ran (they have no device time);"
                " its host times are the capture's cost, not latency (analyze the replay"
                " with --capture THIS for the replay's times per layer)",
                {"captures": captured.windows, "launches": unrun},
            )
        )
    return notes


__all__ = [
    "CAPTURE_ANNOTATION",
    "GRAPH_LAUNCH",
    "CapturedLaunches",
    "GraphLaunch",
    "align",
    "capture_notes",
    "captured_graphs",
    "captured_launches",
    "device_tokens",
    "graph_facts",
    "graph_launches",
    "replay_section",
]
