"""The findings and the notes: what the diagnosis flagged, and the facts the numbers
depend on."""

from __future__ import annotations

from layerprof.analysis.diagnose import Finding, checks, run_checks
from layerprof.render.html.page import Section, esc, paragraph
from layerprof.render.html.subject import Subject, rank_name

_SEVERITY_CLASS = {"high": "bad", "warning": "warn", "info": "info"}


def findings_section(s: Subject) -> Section | None:
    """One card per finding, most severe first; an explicit empty state (none for a diff)."""
    if s.diff is not None:
        return None
    if not s.findings:
        ran = run_checks(s.run) if s.run is not None else [c for p in s.ranks for c in checks(p)]
        said = f" Checked: {'; '.join(ran)}." if ran else ""
        body = paragraph(f"No findings: the diagnosis found nothing worth flagging.{said}", "empty")
        return Section("findings", "Findings", body)
    body = "".join(_finding_card(f) for f in s.findings)
    return Section("findings", f"Findings ({len(s.findings)})", body)


def _finding_card(f: Finding) -> str:
    cls = _SEVERITY_CLASS.get(f.severity, "info")
    where = f" <code>{esc(f.layer or '(root)')}</code>" if f.layer is not None else ""
    detail = f"<p>{esc(f.detail)}</p>" if f.detail else ""
    hint = f'<p class="hint">{esc(f.hint)}</p>' if f.hint else ""
    return (
        f'<div class="finding {cls}"><span class="badge {cls}">{esc(f.severity)}</span>'
        f"<b>{esc(f.title)}</b>{where}{detail}{hint}</div>"
    )


def notes_section(s: Subject) -> Section | None:
    """The profile's notes; for a Run also its own notes, the skipped files, the traces
    that failed and each rank's notes."""
    notes: list[str] = []
    run = s.run
    if run is not None:
        notes += [n.text for n in run.notes] + [f"skipped: {why}" for why in run.skipped]
        notes += [f"failed: {why}" for why in run.failed]
    for p in s.ranks:
        prefix = f"{rank_name(p)}: " if s.multi_rank else ""
        notes += [prefix + n.text for n in p.notes]
    if not notes:
        return None
    items = "".join(f"<li>{esc(n)}</li>" for n in notes)
    return Section("notes", "Notes", f'<ul class="notes">{items}</ul>')
