"""A self-contained, offline HTML report of a Profile, a Run or a Diff.

The page is one file: the template, CSS, a partial plotly.js bundle (see
``assets/PLOTLY_BUNDLE.md``) and the report's own small script are inlined, so
it opens from disk, can be mailed, and loads nothing from the network.

It reads the typed objects only (never a codec dict): each section of
``sections.SECTIONS`` turns the :class:`~layerprof.render.html.subject.Subject`
into escaped HTML (so the numbers are readable with scripts off, and tests can
check them without a browser) plus typed chart data (``charts.py``); the
script draws the charts from one embedded JSON document and adds sorting and
filtering to the tables. The JSON is escaped so that ``</script>`` or ``<!--``
in a layer name cannot end the ``<script>`` element early. No torch import here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from layerprof.analysis.diagnose import diagnose, diagnose_run
from layerprof.errors import UsageError
from layerprof.files import write_atomic
from layerprof.pivot.diff import Diff, GateResult
from layerprof.pivot.profile import Profile, Run
from layerprof.render.html import sections as _sections
from layerprof.render.html.header import default_title, header
from layerprof.render.html.page import Section, document, json_for_script
from layerprof.render.html.subject import Subject

if TYPE_CHECKING:
    from layerprof.analysis.diagnose import Finding

__all__ = ["Section", "Subject", "json_for_script", "render_html", "write_html"]


def render_html(
    obj: Profile | Run | Diff,
    *,
    findings: Sequence[Finding] | None = None,
    title: str | None = None,
    gate: GateResult | None = None,
) -> str:
    """The whole report page of ``obj`` as one string.

    ``findings`` default to the diagnosis of a Profile or a Run (pass ``()``
    for none); a Diff has none. ``gate`` is the regression gate to show with a
    Diff (default: the one a saved diff carries).
    """
    if not isinstance(obj, Profile | Run | Diff):
        raise UsageError(f"the HTML report cannot show a {type(obj).__name__}")
    subject = Subject(obj, tuple(findings if findings is not None else _diagnose(obj)), gate)
    sections = [s for fn in _sections.SECTIONS if (s := fn(subject)) is not None]
    heading = title or default_title(subject)
    return document(sections, heading=heading, header=header(subject, heading))


def write_html(
    path: str | os.PathLike[str],
    obj: Profile | Run | Diff,
    *,
    findings: Sequence[Finding] | None = None,
    title: str | None = None,
    gate: GateResult | None = None,
) -> Path:
    """Render the report and write it whole or not at all (``OutputError`` if unwritable)."""
    return write_atomic(path, render_html(obj, findings=findings, title=title, gate=gate))


def _diagnose(obj: Profile | Run | Diff) -> list[Finding]:

    if isinstance(obj, Profile):
        return diagnose(obj)
    if isinstance(obj, Run):
        return diagnose_run(obj)
    return []
