"""Text for chart labels: escaped for plotly's few tags, and cut in the middle when long.

Below both the page and the charts, which each need them (the charts' data
and the page's name columns), so neither imports the other for them.
"""

from __future__ import annotations

import html

from layerprof.render.terminal import shown


def label(value: object) -> str:
    """Text for a plotly label: plotly parses a few tags, so ``<``/``>``/``&`` are entities."""
    return html.escape(shown(str(value)), quote=False)


def short(text: str, limit: int = 48) -> str:
    """Cut the middle of a long label: both a kernel's name and a path's leaf matter."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 5
    return text[:head] + "…" + text[-(limit - 1 - head) :]
