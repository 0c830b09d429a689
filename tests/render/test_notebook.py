"""Profile, Run and Diff display themselves in Jupyter: the HTML report, inline, offline."""

from __future__ import annotations

import html
import re

import pytest

from tests.support.html_subjects import cpu_run, hooks_profile, hostile_profile, slow_diff, tables


@pytest.mark.parametrize(
    "make", [hooks_profile, cpu_run, slow_diff], ids=["profile", "run", "diff"]
)
def test_repr_html_is_the_report_in_a_sandboxed_frame(make) -> None:
    obj = make()
    shown = obj._repr_html_()
    m = re.fullmatch(
        r'<iframe srcdoc="([^"]*)" sandbox="allow-scripts allow-downloads"[^>]*></iframe>', shown
    )
    assert m, shown[:200]
    page = html.unescape(m.group(1))
    assert page == obj.render("html")
    assert tables(page)  # the report's tables, not a summary line
    # offline: no tag fetches a script, style, image or frame from elsewhere
    fetch = r"""<(script|link|img|iframe|embed|object)\b[^>]*\b(src|href|data)\s*=\s*["']?(https?:)?//"""
    assert not re.search(fetch, page, re.IGNORECASE)


def test_hostile_names_cannot_leave_the_frame() -> None:
    """A layer named ``"><script>`` stays text: the srcdoc attribute is escaped whole."""
    shown = hostile_profile()._repr_html_()
    inside = shown.removeprefix('<iframe srcdoc="').split('" sandbox=', 1)[0]
    assert '"' not in inside and "<" not in inside
