"""The device-work card of a trace: the steps whose idle time, utilization and breakdown
were measured over their work's own span on the device (it ran outside their host span),
and each device's clock check (see docs/trace.md, "A step's device work")."""

from __future__ import annotations

from layerprof.render.html.page import TABLE_LIMIT, Col, Section, esc, table, text_col
from layerprof.render.html.subject import Subject
from layerprof.render.stepwork_text import WORK_HEADERS, clock_lines, shown, work_rows, work_title


def device_work_section(s: Subject) -> Section | None:
    work = s.profile.trace.device_work if s.profile is not None else None
    if work is None or not shown(work):
        return None
    body = ""
    rows = work_rows(work, TABLE_LIMIT)
    if rows:
        body += f"<p>{esc(work_title(work, TABLE_LIMIT))}</p>"
        cols: list[Col[tuple[str, ...]]] = [_column(i, h) for i, h in enumerate(WORK_HEADERS)]
        body += table("lp-device-work", cols, rows)
    body += "".join(f"<p>{esc('clocks, ' + line)}</p>" for line in clock_lines(work))
    intro = (
        "A step's device work is what its launches made, wherever and whenever it ran. Where"
        " it ran outside the step's host span (queued launches, a graph replay, clocks that"
        " disagree), idle time, utilization and the step breakdown are measured over that"
        " work's own span on the device."
    )
    return Section("device-work", "Device work per step", body, intro)


def _column(i: int, header: str) -> Col[tuple[str, ...]]:
    def cell(row: tuple[str, ...]) -> str:
        return row[i]

    return text_col(header, cell)
