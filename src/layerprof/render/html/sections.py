"""The page's sections, in the order they appear: the one place a new section plugs in.

A section is a function ``(Subject) -> Section | None``: it reads the typed
objects of the subject (``s.profile``, ``s.ranks``, ``s.run``, ``s.diff``,
``s.findings``) and returns a card, or None when the subject has nothing for
it. Write it in a module of its own (``render/html/<yours>.py``) with the
helpers of ``page.py`` (``table``/``Col``, ``stat_cards``, ``chart_slot``) and
``charts.py`` (``Bars``, ...), then add it to ``SECTIONS`` below with the typed
fields of a Profile, Run or Diff it shows (``"Profile.steps"``): the console lists
its sections the same way (``render/console/sections.py``), and
tests/render/test_renderers.py checks that every typed field is shown by both, or says why not. Tables of
every rank's rows (with a Rank column when there are several) come from
``trace.per_rank`` and ``trace.columns``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from layerprof.render.html.compiled import compiled_section
from layerprof.render.html.diff import (
    diff_kernels_section,
    diff_layers_section,
    diff_ops_section,
    diff_phases_section,
    diff_section,
    diff_steps_section,
)
from layerprof.render.html.distributed import distributed_section
from layerprof.render.html.findings import findings_section, notes_section
from layerprof.render.html.flops import roofline_section
from layerprof.render.html.generation import generation_section
from layerprof.render.html.loop import loop_section
from layerprof.render.html.memory import activation_memory_section
from layerprof.render.html.page import Section
from layerprof.render.html.profile import (
    hierarchy_section,
    latency_section,
    layer_ops_section,
    layers_section,
    top_section,
)
from layerprof.render.html.ranks import layer_ranks_section
from layerprof.render.html.replay import graph_replay_section
from layerprof.render.html.serving import serving_section
from layerprof.render.html.stepwork import device_work_section
from layerprof.render.html.subject import Subject
from layerprof.render.html.trace import (
    allocator_section,
    annotations_section,
    cross_rank_section,
    devices_section,
    kernels_section,
    launches_section,
    memcpy_section,
    rank_ops_section,
    steps_section,
)

_SectionFn = Callable[[Subject], Section | None]


@dataclass(frozen=True)
class Registered:
    """A section function and the typed fields it shows; called like the function."""

    fn: _SectionFn
    renders: tuple[str, ...]

    def __call__(self, s: Subject) -> Section | None:
        return self.fn(s)


#: What the page header (``header.py``) shows, above every section.
HEADER_RENDERS: tuple[str, ...] = (
    "Profile.meta",
    "Profile.source",
    "Run.ranks",
    "Diff.base_meta",
    "Diff.new_meta",
)

SECTIONS: tuple[Registered, ...] = (
    # a diff
    Registered(diff_section, ("Diff.latency", "Diff.gate_result")),
    Registered(diff_steps_section, ("Diff.steps",)),
    Registered(diff_phases_section, ("Diff.phases",)),
    Registered(diff_layers_section, ("Diff.layers",)),
    Registered(diff_ops_section, ("Diff.ops",)),
    Registered(diff_kernels_section, ("Diff.kernels",)),
    # a profile (a run's lowest rank)
    Registered(latency_section, ("Profile.latency_ns", "Profile.overhead")),
    Registered(hierarchy_section, ("Profile.layers",)),
    Registered(layers_section, ("Profile.layers", "Profile.flops")),
    Registered(loop_section, ("Profile.loop",)),
    Registered(generation_section, ("Profile.generation",)),
    Registered(serving_section, ("Profile.serving",)),
    Registered(graph_replay_section, ("Profile.graph_replay",)),
    Registered(compiled_section, ("Profile.compiled",)),
    Registered(top_section, ("Profile.ops",)),
    Registered(layer_ops_section, ("Profile.ops",)),
    Registered(roofline_section, ("Profile.flops",)),
    Registered(activation_memory_section, ("Profile.activation_memory",)),
    # trace sections, every rank
    Registered(steps_section, ("Profile.steps",)),
    Registered(cross_rank_section, ("Run.cross",)),
    Registered(layer_ranks_section, ("Run.layer_ranks",)),
    Registered(
        distributed_section,
        (
            "Profile.breakdown",
            "Profile.communication",
            "Profile.queues",
            "Profile.memory_timeline",
            "Run.stragglers",
        ),
    ),
    Registered(devices_section, ("Profile.devices",)),
    Registered(device_work_section, ("Profile.device_work",)),
    Registered(memcpy_section, ("Profile.memcpy",)),
    Registered(kernels_section, ("Profile.kernels", "Profile.kinds")),
    Registered(launches_section, ("Profile.launches",)),
    Registered(allocator_section, ("Profile.memory",)),
    Registered(annotations_section, ("Profile.annotations",)),
    Registered(rank_ops_section, ("Run.ranks",)),
    # last; the diagnosis reads the passes check (and every other section) into findings
    Registered(findings_section, ("Profile.passes",)),
    Registered(notes_section, ("Profile.notes", "Run.notes")),
)
