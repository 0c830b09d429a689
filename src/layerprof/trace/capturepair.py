"""A graph replay read through its capture: each replayed kernel gets the layer, op
and shapes whose launch made it at capture time, with the replay's own timings.

The replay trace's graph launch carries every kernel of the graph and nothing
that encloses them; the capture trace holds one launch call per kernel under
the ops and module spans that made it, but those kernels never ran. Each graph
launch is matched to a capture (the batch its step names, then the kernel
sequence: ``replay.align``), and the two are merged into one set of event
tables (``trace/mergedspans.py``): the captures' host spans (their times are the
capture's), then the replay's own, with the replay's device ops, a graph's each
carrying the correlation id of the captured launch it paired with. The one
attribution engine (``reduce``) then fills the layers,
their device times and the ops per layer as it does for any trace; the
replay's own reduce keeps its steps, latency, devices, kernels and launches.
Nothing is guessed silently: the ``graph_replay`` section counts what paired,
names what did not, and a graph no capture matches is refused or named.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from layerprof.errors import TraceError
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile, Run, TraceSections
from layerprof.pivot.sections.replay import CaptureFile, GraphMatch, GraphReplay, MissedKernel
from layerprof.reading import read_input
from layerprof.trace.distributed.ranks import merge
from layerprof.trace.events import (
    ANNOTATION,
    EventCollector,
    EventTables,
)
from layerprof.trace.mergedspans import (
    COMPILED_PIECE,
    one_step,
    pieces_as_modules,
    quiet_tail,
    stacked,
)
from layerprof.trace.reader import TRACE_SUFFIXES, decode, read_trace_file
from layerprof.trace.reduce import reduce
from layerprof.trace.replay import (
    COPY_TOKEN,
    SET_TOKEN,
    UNNAMED_KERNEL,
    CapturedLaunches,
    GraphLaunch,
    align,
    captured_graphs,
    device_tokens,
    graph_launches,
)

#: where an engine leaves its captures beside a replay, and the file naming them
CAPTURE_FOLDER = "capture_traces"
DETAILS_FILE = "execution_details.json"
#: a graph is read through a capture only when at least this share of its device
#: ops pairs with the capture's launches; below, it is left unmatched and named
MIN_MATCHED = 0.5
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # as trace/events.py cleans names


@dataclass(frozen=True)
class CaptureInput:
    """A capture trace to read, with what its engine says about it."""

    path: str
    batch: int | None = None
    mode: str = ""


def paired_captures(directory: str | os.PathLike[str]) -> list[CaptureInput] | None:
    """The captures a replay's folder names in ``capture_traces/execution_details.json``
    (``[{"file", "batch_size", "mode"}, ...]``), None when it has none."""
    details = Path(directory) / CAPTURE_FOLDER / DETAILS_FILE
    if not details.is_file():
        return None
    try:
        entries = orjson.loads(details.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise TraceError(f"{details}: not readable JSON ({exc})") from exc
    if not isinstance(entries, list) or not entries:
        raise TraceError(f"{details}: expected a list of {{file, batch_size, mode}} entries")
    out = []
    for i, entry in enumerate(entries):
        file = entry.get("file") if isinstance(entry, dict) else None
        if not isinstance(file, str) or not file:
            raise TraceError(f"{details}: entry {i} has no 'file'")
        batch = entry.get("batch_size")
        if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool)):
            raise TraceError(f"{details}: entry {i}: 'batch_size' is not an integer: {batch!r}")
        mode = entry.get("mode")
        path = details.parent / file
        if not path.is_file():
            raise TraceError(f"{details}: entry {i} names {file}, which is not in {details.parent}")
        out.append(CaptureInput(str(path), batch, mode if isinstance(mode, str) else ""))
    return out


def replay_in(directory: str | os.PathLike[str]) -> str:
    """The one replay trace beside ``capture_traces/`` in a folder."""
    found = sorted(
        p for p in Path(directory).iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
    )
    if len(found) != 1:
        names = ", ".join(p.name for p in found) or "none"
        raise TraceError(
            f"{directory}: a folder with {CAPTURE_FOLDER}/ should hold one replay trace,"
            f" found {len(found)} ({names})"
        )
    return str(found[0])


@dataclass(frozen=True)
class _Capture:
    input: CaptureInput
    tables: EventTables
    header: dict[str, Any]
    graphs: tuple[CapturedLaunches, ...]  # one per capture window
    compiled: int

    @property
    def named(self) -> bool:
        return all(UNNAMED_KERNEL not in g.tokens for g in self.graphs)

    @property
    def launches(self) -> int:
        return sum(len(g.rows) for g in self.graphs)

    def batch(self, g: CapturedLaunches) -> int | None:
        """A window's batch: its own annotation's, else the engine's for a one-graph file."""
        if g.batch is not None:
            return g.batch
        return self.input.batch if len(self.graphs) == 1 else None

    @property
    def batches(self) -> tuple[int | None, ...]:
        return tuple(self.batch(g) for g in self.graphs)

    @property
    def mode(self) -> str:
        return self.input.mode or next((g.mode for g in self.graphs if g.mode), "")


def read_capture(
    source: CaptureInput, *, keep_shapes: bool = False, max_input_size: int | None = None
) -> _Capture:
    """Decode a capture trace, keeping what each launch call's ``args.kernel`` names."""
    data = read_input(Path(source.path), limit=max_input_size, error=TraceError)
    collector = EventCollector(keep_shapes=keep_shapes, keep_launch_kernels=True)
    header = decode(data, collector.add_batch, source.path)
    del data
    tables = collector.finish()
    cleaned = {
        c: _clean(n)
        for c, n in (collector.launch_kernels or {}).items()
        if type(c) is int and type(n) is str
    }
    graphs = tuple(captured_graphs(tables, cleaned))
    if not any(len(g.rows) for g in graphs):
        raise TraceError(
            f"{source.path}: no launches recorded while capturing a graph"
            " (not a capture trace, or cut off before the capture began)"
        )
    compiled = sum(
        1
        for n in tables.host.name[tables.host.kind == ANNOTATION].tolist()
        if tables.names[n].startswith(COMPILED_PIECE)
    )
    return _Capture(source, tables, header, graphs, compiled)


def _clean(name: str) -> str:
    """A name as the collector keeps it (control characters read as ``?``)."""
    return _CONTROL.sub("?", name)


@dataclass(frozen=True)
class _Pairing:
    graph: GraphLaunch
    capture: int | None  # index into the captures
    window: int  # index into that capture's graphs
    pairs: list[tuple[int, int]]  # (index into graph.ops, index into captured launches)
    best: tuple[str, int] | None  # the best capture and its pairs, when none was taken
    tied: tuple[str, ...]  # other captures that matched as well (batch unknown)


def _tokens(replayed: list[str], capture: _Capture) -> list[str]:
    """The replay's tokens as the capture can name them (by kind only when it names none)."""
    if capture.named:
        return replayed
    return [t if t in (COPY_TOKEN, SET_TOKEN) else UNNAMED_KERNEL for t in replayed]


#: what pairing one launch found: capture and window, pairs, best miss, ties
_Choice = tuple[int | None, int, list[tuple[int, int]], tuple[str, int] | None, tuple[str, ...]]


def _pairings(
    tables: EventTables, graphs: list[GraphLaunch], captures: list[_Capture]
) -> list[_Pairing]:
    """Each launch's captured graph; launches replaying the same kernels with the same
    step batch (a decode loop's every step) are matched once."""
    counts = [[Counter(g.tokens) for g in c.graphs] for c in captures]
    chosen: dict[tuple[tuple[str, ...], int | None], _Choice] = {}
    out = []
    for graph in graphs:
        replayed = tuple(device_tokens(tables, graph.ops))
        key = (replayed, graph.hint)
        if key not in chosen:
            chosen[key] = _choose(replayed, graph.hint, captures, counts)
        out.append(_Pairing(graph, *chosen[key]))
    return out


def _choose(
    replayed: tuple[str, ...],
    hint: int | None,
    captures: list[_Capture],
    counts: list[list[Counter[str]]],
) -> _Choice:
    """The captured graph these device ops replay: among those pairing at least
    ``MIN_MATCHED`` of them, one whose batch is the step's first, then the most pairs.
    A graph whose names could not pair enough even in another order is not aligned."""
    need = MIN_MATCHED * max(len(replayed), 1)
    scored: list[tuple[bool, int, int, int, int, list[tuple[int, int]]]] = []
    bounds: list[tuple[int, int, int, int, list[str]]] = []
    for i, c in enumerate(captures):
        tokens = _tokens(list(replayed), c)
        have = Counter(tokens)
        for w in range(len(c.graphs)):
            bound = sum((have & counts[i][w]).values())
            bounds.append((bound, -len(bounds), i, w, tokens))
    # The graphs of the step's batch first: one of them that pairs enough wins over
    # every other, which then need no alignment (an engine captures dozens of sizes).
    candidates = [b for b in bounds if b[0] >= need and b[0]]
    ranked = sorted(candidates, key=lambda b: not _agrees(captures[b[2]], b[3], hint))
    for _, order, i, w, tokens in ranked:
        agrees = _agrees(captures[i], w, hint)
        if scored and scored[0][0] and not agrees:
            break
        pairs = align(tokens, captures[i].graphs[w].tokens)
        scored.append((agrees and len(pairs) >= need, len(pairs), order, i, w, pairs))
        scored.sort(key=lambda s: s[:3], reverse=True)
    if not scored or scored[0][1] < need or not scored[0][1]:
        _, _, i, w, tokens = max(bounds, key=lambda b: b[:2])
        count = len(align(tokens, captures[i].graphs[w].tokens))
        return None, 0, [], (_label(captures[i], w), count), ()
    agrees, count, _, i, w, pairs = scored[0]
    tied = tuple(
        _label(captures[x], y) for a, k, _, x, y, _ in scored[1:] if (a, k) == (agrees, count)
    )
    return i, w, pairs, None, tied


def _agrees(c: _Capture, window: int, hint: int | None) -> bool:
    return hint is not None and c.batch(c.graphs[window]) == hint


def _label(c: _Capture, window: int) -> str:
    """A captured graph's name in notes: its file, and its batch where the file has several."""
    if len(c.graphs) == 1:
        return c.input.path
    return f"{c.input.path} (graph {window + 1}, batch {c.batch(c.graphs[window])})"


def analyze_pair(
    replay: str | os.PathLike[str],
    captures: list[CaptureInput],
    *,
    group_by_shape: bool = False,
    max_input_size: int | None = None,
) -> Run:
    """The replay trace read through its capture(s): a one-rank Run whose layers, ops
    and device times per layer are the replay's kernels under the capture's spans."""
    name = str(replay)
    trace = read_trace_file(replay, keep_shapes=group_by_shape, max_input_size=max_input_size)
    graphs = graph_launches(trace.tables)
    if not graphs:
        raise TraceError(
            f"{name}: no graph launch (cudaGraphLaunch / hipGraphLaunch) to read through"
            f" {', '.join(c.path for c in captures)}: is it a graph replay?"
        )
    read = [
        read_capture(c, keep_shapes=group_by_shape, max_input_size=max_input_size) for c in captures
    ]
    pairings = _pairings(trace.tables, graphs, read)
    if all(p.capture is None for p in pairings):
        best = max((p.best for p in pairings if p.best), key=lambda b: b[1])
        total = max(len(g.ops) for g in graphs)
        raise TraceError(
            f"{name}: no capture matches its graph launch (best: {best[0]} pairs {best[1]}"
            f" of {total} device ops): is it a capture of the same model and batch?"
        )
    replay_profile = reduce(
        trace.tables, trace.header, rank=0, file=name, group_by_shape=group_by_shape
    )
    used = sorted({p.capture for p in pairings if p.capture is not None})
    merged_tables, header = _merged(trace.tables, [read[i] for i in used], pairings, used)
    merged = reduce(
        merged_tables, header, rank=0, file=name, group_by_shape=group_by_shape, whole_steps=True
    )
    section = _section(trace.tables, read, pairings)
    profile = replace(
        replay_profile,
        layers=merged.layers,
        samples=merged.samples,
        ops=merged.ops,
        graph_replay=section,
        notes=_layer_notes(replay_profile, merged),
        trace=_layer_source(replay_profile, merged),
    ).with_notes(*_notes(section, read, pairings))
    profile = _serving(profile, trace.tables, merged_tables, header)
    return merge(name, [profile])


def _serving(
    profile: Profile, replay: EventTables, merged: EventTables, header: dict[str, Any]
) -> Profile:
    """The replay's profile, its serving steps' layer times per phase and FLOPs taken
    from the captured layers and ops (the replay's own have none but its sampler's)."""
    trace = profile.trace
    if trace.serving is None or trace.steps is None:
        return profile
    from layerprof.trace.replaysteps import serving_through_capture  # serving replays only

    serving, notes = serving_through_capture(
        trace.serving, replay, trace.steps, merged, header, profile.samples
    )
    kept = tuple(n for n in profile.notes if n.kind != "serving-flops")
    return replace(profile, trace=replace(trace, serving=serving), notes=kept).with_notes(*notes)


#: the reducer's notes on where the layers came from: the capture's, once merged
_LAYER_NOTES = frozenset({"layer-source", "no-module-events"})


def _layer_notes(replay: Profile, merged: Profile) -> tuple[Note, ...]:
    """The replay's notes, those on where the layers came from taken from the merge."""
    return (
        *(n for n in replay.notes if n.kind not in _LAYER_NOTES),
        *(n for n in merged.notes if n.kind in _LAYER_NOTES),
    )


def _layer_source(replay: Profile, merged: Profile) -> TraceSections:
    """The replay's trace sections, naming the merge's source of the layers."""
    trace, mine, theirs = replay.trace, replay.trace.source, merged.trace.source
    if mine is None or theirs is None:
        return trace
    return replace(trace, source=replace(mine, module_source=theirs.module_source))


def _merged(
    replay: EventTables,
    captures: list[_Capture],
    pairings: list[_Pairing],
    used: list[int],
) -> tuple[EventTables, dict[str, Any]]:
    """The captures' host spans, then the replay's own, with every device op of the
    replay: a graph's op carrying the correlation id of the captured launch it paired
    with (one that paired with nothing, none: it stays off the layers), any other op
    its own launch's (the replay's modules, a sampler say, keep their kernels)."""
    parts = stacked([*(c.tables for c in captures), replay])
    names, extra = parts.names, list[str]()
    name_ids = {n: i for i, n in enumerate(names)}
    host = pieces_as_modules(quiet_tail(parts.host, len(replay.host)), names, name_ids, extra)
    host = one_step(host, names, name_ids, extra)
    dev = replay.device
    mine = parts.offsets[-1]
    corr = np.where(dev.corr >= 0, dev.corr + mine, -1)
    slot = {c: k for k, c in enumerate(used)}
    for p in pairings:
        corr[p.graph.ops] = -1
        if p.capture is not None and p.pairs:
            k = slot[p.capture]
            launch_rows = captures[k].graphs[p.window].rows
            got, at = (np.asarray(x, dtype=np.int64) for x in zip(*p.pairs, strict=True))
            corr[p.graph.ops[got]] = captures[k].tables.host.ref[launch_rows[at]] + parts.offsets[k]
    device = replace(
        dev,
        start=dev.start + parts.shifts[-1],
        name=parts.name_maps[-1][dev.name],
        corr=corr,
        ext=np.where(dev.ext >= 0, dev.ext + mine, -1),
    )
    tables = replace(
        captures[0].tables,
        names=(*names, *extra),
        threads=parts.threads,
        shapes=parts.shapes,
        host=host,
        device=device,
        window_end_ns=None,
        device_annotations=None,
        device_categories=dict(replay.device_categories),
        runtime_categories=replay.runtime_categories | captures[0].tables.runtime_categories,
        comm_args={},
    )
    return tables, captures[0].header


def _section(
    replay: EventTables, captures: list[_Capture], pairings: list[_Pairing]
) -> GraphReplay:
    dev = replay.device
    missed: Counter[str] = Counter()
    missed_ns: Counter[str] = Counter()
    graphs = []
    in_graphs = 0
    for p in pairings:
        ops = p.graph.ops
        in_graphs += len(ops)
        paired = np.zeros(len(ops), dtype=bool)
        if p.pairs:
            paired[[a for a, _ in p.pairs]] = True
        for i in ops[~paired].tolist():
            n = replay.names[int(dev.name[i])]
            missed[n] += 1
            missed_ns[n] += int(dev.dur[i])
        graphs.append(
            GraphMatch(
                call=p.graph.call,
                kernels=len(ops),
                device_ns=int(dev.dur[ops].sum()),
                capture=None if p.capture is None else captures[p.capture].input.path,
                capture_batch=None
                if p.capture is None
                else captures[p.capture].batch(captures[p.capture].graphs[p.window]),
                batch_hint=p.graph.hint,
                matched=int(paired.sum()),
                matched_ns=int(dev.dur[ops[paired]].sum()),
            )
        )
    outside = np.ones(len(dev), dtype=bool)
    for p in pairings:
        outside[p.graph.ops] = False
    return GraphReplay(
        captures=tuple(
            CaptureFile(
                c.input.path,
                _one_batch(c.batches),
                c.mode,
                c.launches,
                c.named,
                c.compiled,
                graphs=len(c.graphs),
                batches=tuple(b for b in c.batches if b is not None),
            )
            for c in captures
        ),
        graphs=tuple(graphs),
        missed=tuple(
            MissedKernel(n, missed[n], missed_ns[n])
            for n in sorted(missed, key=lambda n: -missed_ns[n])
        ),
        outside_ops=int(outside.sum()),
        outside_ns=int(dev.dur[outside].sum()),
    )


def _batch_notes(captures: list[_Capture], pairings: list[_Pairing]) -> list[Note]:
    """Launches read through a graph captured for another batch than their step names
    (an engine pads a batch up to a captured size, or the wrong capture was handed in)."""
    odd: Counter[tuple[int, int]] = Counter()
    for p in pairings:
        if p.capture is None or p.graph.hint is None:
            continue
        batch = captures[p.capture].batch(captures[p.capture].graphs[p.window])
        if batch is not None and batch != p.graph.hint:
            odd[(p.graph.hint, batch)] += 1
    return [
        Note(
            "graph-replay-batch",
            f"{n} graph launch{'es' if n != 1 else ''} whose step names batch {hint} read"
            f" through a graph captured for batch {batch} (the kernels matched; an engine"
            " pads a batch up to a captured size, or the capture is another batch's)",
            {"step_batch": hint, "capture_batch": batch, "launches": n},
        )
        for (hint, batch), n in sorted(odd.items())
    ]


def _one_batch(batches: tuple[int | None, ...]) -> int | None:
    return batches[0] if len(set(batches)) == 1 else None


def _notes(section: GraphReplay, captures: list[_Capture], pairings: list[_Pairing]) -> list[Note]:
    share = section.share
    notes = [
        Note(
            "graph-replay-read",
            f"layers read through the capture: {section.matched} of {section.kernels} replayed"
            f" device ops ({section.matched_ns / 1e6:.3f} of {section.device_ns / 1e6:.3f} ms,"
            f" {100 * (share or 0):.1f} %) sit where their launch was captured; the layers'"
            " device times are the replay's; the host times of the captured layers are the"
            " capture's (Python at capture time, not the replay's latency)",
            {
                "matched": section.matched,
                "kernels": section.kernels,
                "matched_ns": section.matched_ns,
                "device_ns": section.device_ns,
            },
        )
    ]
    if section.missed:
        top = ", ".join(f"{m.name[:60]} x{m.count}" for m in section.missed[:3])
        notes.append(
            Note(
                "graph-replay-unmatched",
                f"{section.kernels - section.matched} replayed device ops paired with no"
                f" captured launch and are on no layer: {top}",
                {"count": section.kernels - section.matched},
            )
        )
    for i, p in enumerate(pairings):
        if p.capture is None and p.best is not None:
            notes.append(
                Note(
                    "graph-replay-no-capture",
                    f"graph launch {i + 1} ({p.graph.call}, {len(p.graph.ops)} device ops)"
                    f" matches no capture (best: {p.best[0]}, {p.best[1]} paired): its"
                    " device time is on no layer",
                    {"launch": i + 1},
                )
            )
        if p.tied:
            notes.append(
                Note(
                    "graph-replay-ambiguous",
                    f"graph launch {i + 1} matches {', '.join(p.tied)} as well as the capture"
                    f" read ({_label(captures[p.capture], p.window) if p.capture is not None else '?'}):"
                    " no step annotation names its batch; pass the right one with --capture",
                    {"launch": i + 1},
                )
            )
    notes += _batch_notes(captures, pairings)
    used = {p.capture for p in pairings}
    idle = [c.input.path for i, c in enumerate(captures) if i not in used]
    if idle:
        notes.append(
            Note(
                "graph-capture-unused",
                f"{', '.join(idle)}: no graph launch of the replay was read through"
                f" {'it' if len(idle) == 1 else 'them'} (another batch size, or a graph"
                " this replay does not launch)",
                {"captures": len(idle)},
            )
        )
    unnamed = [c.input.path for c in captures if not c.named]
    if unnamed:
        notes.append(
            Note(
                "graph-capture-unnamed",
                f"{', '.join(unnamed)}: its launch calls name no kernel, so replayed kernels"
                " were paired by position (kernels, copies and fills in order), not by name",
            )
        )
    if any(c.compiled for c in captures):
        notes.append(
            Note(
                "graph-capture-compiled",
                "the captured code is compiled (## Call CompiledFxGraph): each compiled piece"
                " is one layer row, and the layers inside a piece are not visible in a trace"
                " (layerprof run --compile gives them for a live model)",
            )
        )
    replays = Counter(p.capture for p in pairings if p.capture is not None)
    if any(n > 1 for n in replays.values()):
        notes.append(
            Note(
                "graph-replay-repeated",
                "several graph launches replay one capture: each layer's device time is their sum",
            )
        )
    return notes


__all__ = ["CaptureInput", "analyze_pair", "paired_captures", "read_capture", "replay_in"]
