"""The page's sections, in the order they appear: the one place a new section plugs in.

A section is a function ``(Subject) -> Section | None``: it reads the typed
objects of the subject (``s.profile``, ``s.ranks``, ``s.run``, ``s.diff``,
``s.findings``) and returns a card, or None when the subject has nothing for
it. Write it in a module of its own (``render/html/<yours>.py``) with the
helpers of ``page.py`` (``table``/``Col``, ``stat_cards``, ``chart_slot``) and
``charts.py`` (``Bars``, ...), then add it to ``SECTIONS`` below. Tables of
every rank's rows (with a Rank column when there are several) come from
``trace_sections.per_rank`` and ``trace_sections.columns``.
"""

from __future__ import annotations

from collections.abc import Callable

from layerprof.render.html.compiled import compiled_section
from layerprof.render.html.diff_sections import (
    diff_kernels_section,
    diff_layers_section,
    diff_ops_section,
    diff_section,
    diff_steps_section,
)
from layerprof.render.html.distributed import distributed_section
from layerprof.render.html.findings import findings_section, notes_section
from layerprof.render.html.page import Section
from layerprof.render.html.profile_sections import (
    hierarchy_section,
    latency_section,
    layer_ops_section,
    layers_section,
    top_section,
)
from layerprof.render.html.ranks import layer_ranks_section
from layerprof.render.html.roofline import roofline_section
from layerprof.render.html.steps import loop_section
from layerprof.render.html.subject import Subject
from layerprof.render.html.trace_sections import (
    annotations_section,
    cross_rank_section,
    devices_section,
    kernels_section,
    launches_section,
    memcpy_section,
    memory_section,
    rank_ops_section,
    steps_section,
)

SectionFn = Callable[[Subject], Section | None]

SECTIONS: tuple[SectionFn, ...] = (
    # a diff
    diff_section,
    diff_steps_section,
    diff_layers_section,
    diff_ops_section,
    diff_kernels_section,
    # a profile (a run's lowest rank)
    latency_section,
    hierarchy_section,
    layers_section,
    loop_section,
    compiled_section,
    top_section,
    layer_ops_section,
    roofline_section,
    # trace sections, every rank
    steps_section,
    cross_rank_section,
    layer_ranks_section,
    distributed_section,
    devices_section,
    memcpy_section,
    kernels_section,
    launches_section,
    memory_section,
    annotations_section,
    rank_ops_section,
    # last
    findings_section,
    notes_section,
)
