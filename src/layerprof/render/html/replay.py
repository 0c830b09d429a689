"""The graph-replay card: how far a replay's kernels were read through their capture,
each graph launch and the device ops no captured launch paired with
(``Profile.graph_replay``)."""

from __future__ import annotations

from layerprof.pivot.sections.replay import MissedKernel
from layerprof.render.html.page import Col, Section, esc, table, text_col, time_col
from layerprof.render.html.subject import Subject
from layerprof.render.replay_text import replay_lines, short_name, title
from layerprof.units import unit_for

#: unmatched kernel names shown in the table (the JSON keeps them all)
_MISSED_ROWS = 20


def graph_replay_section(s: Subject) -> Section | None:
    r = s.profile.graph_replay if s.profile is not None else None
    if r is None:
        return None
    body = "".join(f"<p>{esc(line)}</p>" for line in replay_lines(r))
    if r.missed:
        unit = unit_for(max(m.device_ns for m in r.missed))
        cols: list[Col[MissedKernel]] = [
            text_col("Unmatched device op", lambda m: short_name(m.name), css="path"),
            text_col("Count", lambda m: str(m.count)),
            time_col("Device time", lambda m: m.device_ns, unit),
        ]
        body += table("lp-graph-missed", cols, list(r.missed[:_MISSED_ROWS]))
    return Section(
        "graph-replay",
        title(r),
        body,
        intro="Each replayed kernel sits on the layer whose launch made it at capture time;"
        " the layers' device times are the replay's; the captured layers' host times are"
        " the capture's.",
    )
