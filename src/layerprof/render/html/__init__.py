"""A self-contained, offline HTML report of a profile, a trace analysis or a diff.

The page is one file: the template, CSS, a partial plotly.js bundle (see
``assets/PLOTLY_BUNDLE.md``) and the report's own small script are inlined, so
it opens from disk, can be mailed, and loads nothing from the network.

Split of work: this module renders every table and every piece of text as
escaped HTML (so the numbers are readable even with scripts off, and tests can
check them without a browser); the script draws the charts from one embedded
JSON document and adds sorting and filtering to the tables. The JSON is
escaped so that ``</script>`` or ``<!--`` in a layer name cannot end the
``<script>`` element early.

Inputs are read as dicts (``Profile.to_dict()``, the ``layerprof.trace/1`` and
``layerprof.diff/1`` documents): a key that is missing hides its part of the
page instead of failing, because those schemas grow. No torch import here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from layerprof.errors import UsageError
from layerprof.files import write_atomic
from layerprof.profile import Profile
from layerprof.render.html.diff_sections import _diff_section
from layerprof.render.html.distributed import _distributed_section
from layerprof.render.html.page import (
    _asset,
    _default_title,
    _e,
    _fill,
    _findings_section,
    _header,
    _Page,
    _script_safe,
    fmt_bytes,
    fmt_calls,
    fmt_count,
    fmt_ms,
    fmt_pct,
    json_for_script,
    shape_text,
)
from layerprof.render.html.profile_sections import _notes_section, _profile_sections
from layerprof.render.html.trace_sections import _trace_section

__all__ = [
    "fmt_bytes",
    "fmt_calls",
    "fmt_count",
    "fmt_ms",
    "fmt_pct",
    "json_for_script",
    "render_html",
    "shape_text",
    "write_html",
]


# ---------------------------------------------------------------- public API


def render_html(
    *,
    profile: Profile | None = None,
    trace: Mapping[str, Any] | None = None,
    diff: Mapping[str, Any] | None = None,
    findings: Sequence[Mapping[str, Any]] = (),
    title: str | None = None,
) -> str:
    """The whole report page as one string.

    Any combination of ``profile``, ``trace`` (a ``layerprof.trace/1`` dict)
    and ``diff`` (a ``layerprof.diff/1`` dict) may be given, at least one.
    ``findings`` are diagnosis results (dicts with ``severity``, ``title``,
    ``detail``, ``layer``, ``hint``, ... as far as present); an empty
    sequence shows the empty state.
    """
    if profile is None and trace is None and diff is None:
        raise UsageError("render_html needs a profile, a trace analysis or a diff")
    page = _Page()
    pdata = profile.to_dict() if profile is not None else None
    if pdata is not None:
        _profile_sections(page, pdata)
    if trace is not None:
        _trace_section(page, trace)
        _distributed_section(page, trace)
    if diff is not None:
        _diff_section(page, diff)
    _findings_section(page, findings)
    if pdata is not None:
        _notes_section(page, pdata)
    heading = title or _default_title(pdata, trace, diff)
    return _fill(
        _asset("report.html"),
        title=_e(heading),
        header=_header(heading, pdata, trace, diff),
        nav=page.nav(),
        body="\n".join(page.sections),
        style=_asset("report.css"),
        plotly=_script_safe(_asset("plotly-layerprof.min.js")),
        app=_script_safe(_asset("report.js")),
        data=json_for_script(page.charts),
    )


def write_html(
    path: str | os.PathLike[str],
    *,
    profile: Profile | None = None,
    trace: Mapping[str, Any] | None = None,
    diff: Mapping[str, Any] | None = None,
    findings: Sequence[Mapping[str, Any]] = (),
    title: str | None = None,
) -> Path:
    """Render the report and write it whole or not at all (``OutputError`` if unwritable)."""
    text = render_html(profile=profile, trace=trace, diff=diff, findings=findings, title=title)
    return write_atomic(path, text)
