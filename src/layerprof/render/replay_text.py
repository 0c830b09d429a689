"""Lines about a graph replay read through its capture that the console and the HTML
report both print (``Profile.graph_replay``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprof.units import fmt_share, human_time

if TYPE_CHECKING:
    from layerprof.pivot.sections.replay import GraphReplay

#: how long a kernel name may print in a line (template kernels run to thousands)
NAME_WIDTH = 90


def short_name(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"


def title(r: GraphReplay) -> str:
    if not r.captures:
        return "CUDA/HIP graph launches (no capture read)"
    return "graph replay read through its capture"


def replay_lines(r: GraphReplay) -> list[str]:
    """What the graph launches replayed and, with captures read, how much of it is on layers."""
    if not r.captures:
        calls = ", ".join(sorted({g.call for g in r.graphs}))
        return [
            f"{len(r.graphs)} graph launch{'es' if len(r.graphs) != 1 else ''} ({calls})"
            f" replayed {r.kernels} device ops, {human_time(r.device_ns)}: no op or module"
            " encloses them, so their time sits on the op or module around the launch",
            "analyze REPLAY --capture CAPTURE (the trace recorded while the graph was"
            " captured) puts each on the layer whose launch made it",
        ]
    lines = [
        f"graphs matched {r.graphs_matched} of {len(r.graphs)}; device ops on layers"
        f" {r.matched} of {r.kernels}; device time {human_time(r.matched_ns)} of"
        f" {human_time(r.device_ns)} ({fmt_share(r.share)})",
    ]
    if r.outside_ops:
        lines.append(
            f"outside the graphs: {r.outside_ops} device ops, {human_time(r.outside_ns)}"
            " (launched one by one: on the replay's own modules where it has them)"
        )
    for c in r.captures:
        if c.graphs > 1:
            sizes = ", ".join(map(str, c.batches)) or "unknown"
            what = [f"{c.graphs} graphs (batch {sizes})"]
        else:
            what = [f"batch {c.batch}" if c.batch is not None else "batch unknown"]
        if c.mode:
            what.append(f"mode {c.mode}")
        what.append(f"{c.launches} launches captured")
        if not c.named:
            what.append("kernels unnamed: paired by position")
        if c.compiled_pieces:
            what.append(f"{c.compiled_pieces} compiled pieces")
        lines.append(f"capture {c.file}: {', '.join(what)}")
    for i, g in enumerate(r.graphs, 1):
        read = f"read through {g.capture}" if g.capture else "matched no capture"
        if g.capture and g.capture_batch is not None:
            read += f" (batch {g.capture_batch})"
        hint = f", step batch {g.batch_hint}" if g.batch_hint is not None else ""
        lines.append(
            f"launch {i} ({g.call}{hint}): {g.matched} of {g.kernels} device ops paired,"
            f" {human_time(g.matched_ns)} of {human_time(g.device_ns)}; {read}"
        )
    return lines


def missed_lines(r: GraphReplay, top: int) -> list[str]:
    """The replayed device ops no captured launch paired with, the costliest first."""
    return [f"{m.count} x {short_name(m.name)} ({human_time(m.device_ns)})" for m in r.missed[:top]]
