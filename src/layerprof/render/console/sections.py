"""The terminal report's sections, in the order they print: the one place a new section plugs in.

A section is a :class:`Section`: a name, the typed fields of a Profile, a Run or a
Diff it shows (``renders``, e.g. ``"Profile.steps"``), and a function
``(obj, console, options) -> None`` that prints nothing when the object has
nothing for it. Write the printer in a module of its own (``render/console/<yours>.py``)
with the tables of ``columns.py``, then add it to ``PROFILE_SECTIONS``,
``RUN_SECTIONS`` or ``DIFF_SECTIONS`` below. The HTML report lists its sections the
same way (``render/html/sections.py``); tests/render/test_renderers.py checks that every
typed field is shown by both, or says why not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from layerprof.analysis.diagnose import checks, diagnose, diagnose_run, run_checks
from layerprof.render.console.compiled import print_compiled
from layerprof.render.console.distributed import (
    print_breakdown,
    print_communication,
    print_memory_timeline,
    print_queues,
)
from layerprof.render.console.findings import print_findings
from layerprof.render.console.generation import print_generation
from layerprof.render.console.memory import print_activation_memory
from layerprof.render.console.ops import OpSort, render_ops
from layerprof.render.console.profile import (
    ConsoleOptions,
    SortKey,
    print_header,
    print_layers,
    print_notes,
)
from layerprof.render.console.ranks import (
    print_layers_across_ranks,
    print_rank_rule,
    print_ranks,
    print_run_header,
    reported_ranks,
)
from layerprof.render.console.replay import print_graph_replay
from layerprof.render.console.stepwork import print_device_work
from layerprof.render.console.trace import (
    print_allocator,
    print_devices,
    print_kernels,
    print_launches,
    print_steps,
)
from layerprof.render.terminal import escaping

if TYPE_CHECKING:
    from rich.console import Console

    from layerprof.pivot.diff import Diff, GateResult
    from layerprof.pivot.profile import Profile, Run

T = TypeVar("T")


@dataclass(frozen=True)
class ReportOptions:
    """What the caller asked of the report (``layerprof.sinks.show(obj, **options)``).

    ``top``: rows per table (None: the layer tree, and 10 rows elsewhere, 20 in a
    diff); ``depth``/``sort``/``shapes``: the layer tree's; ``op_sort``/``group_by_shape``:
    the operator tables'; ``findings``: print the diagnosis; ``gate``: a diff's gate.
    """

    depth: int | None = None
    top: int | None = None
    sort: SortKey = "order"
    shapes: bool = True
    op_sort: OpSort = "self"
    group_by_shape: bool = False
    findings: bool = True
    gate: GateResult | None = None

    @classmethod
    def of(cls, options: dict[str, Any]) -> ReportOptions:
        """The options this report knows; others (meant for other formats) are ignored."""
        known = {k: v for k, v in options.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    @property
    def rows(self) -> int:
        return self.top or 10


@dataclass(frozen=True)
class Section(Generic[T]):
    """One part of the report of a ``T`` and the typed fields of ``T`` it shows."""

    name: str
    renders: tuple[str, ...]
    print: Callable[[T, Console, ReportOptions], None]


# ---------------------------------------------------------------- a profile


def _layers(p: Profile, out: Console, o: ReportOptions) -> None:
    opts = ConsoleOptions(depth=o.depth, top=o.top, sort=o.sort, shapes=o.shapes)
    print_layers(p, out, opts)


def _ops(p: Profile, out: Console, o: ReportOptions) -> None:
    if not p.ops:
        return
    forward = [x for x in p.ops if x.phase == "forward"]
    render_ops(forward, out, top=o.rows, sort=o.op_sort, by_shape=o.group_by_shape)
    backward = [x for x in p.ops if x.phase == "backward"]
    if backward:
        render_ops(
            backward,
            out,
            top=o.rows,
            sort=o.op_sort,
            title="backward operators",
            by_shape=o.group_by_shape,
        )


def _loop(p: Profile, out: Console, o: ReportOptions) -> None:
    if p.loop is None:
        return
    # here, not at the top: only a training loop's report creates the loop's types
    from layerprof.render.console.loop import print_loop

    print_loop(out, p)


def _serving(p: Profile, out: Console, o: ReportOptions) -> None:
    if p.trace.serving is None:
        return
    # here, not at the top: only a serving trace's report creates the generate's types
    from layerprof.render.console.serving import print_serving

    print_serving(p, out, o.rows)


def _findings(p: Profile, out: Console, o: ReportOptions) -> None:

    if o.findings:
        print_findings(diagnose(p), out, checks=checks(p))


PROFILE_SECTIONS: tuple[Section[Profile], ...] = (
    Section(
        "header",
        ("Profile.meta", "Profile.signatures", "Profile.latency_ns", "Profile.overhead"),
        lambda p, out, o: print_header(p, out),
    ),
    Section("layers", ("Profile.layers", "Profile.flops"), _layers),
    Section("training loop", ("Profile.loop",), _loop),
    Section("generation", ("Profile.generation",), lambda p, out, o: print_generation(out, p)),
    Section("serving", ("Profile.serving",), _serving),
    Section("compiled", ("Profile.compiled",), lambda p, out, o: print_compiled(out, p)),
    Section(
        "graph replay",
        ("Profile.graph_replay",),
        lambda p, out, o: print_graph_replay(p, out, o.rows),
    ),
    Section(
        "activation memory",
        ("Profile.activation_memory",),
        lambda p, out, o: print_activation_memory(out, p),
    ),
    Section("notes", ("Profile.notes",), lambda p, out, o: print_notes(p, out)),
    # trace sections
    Section("steps", ("Profile.steps",), lambda p, out, o: print_steps(p, out)),
    Section(
        "devices",
        ("Profile.devices", "Profile.source", "Profile.memcpy"),
        lambda p, out, o: print_devices(p, out),
    ),
    Section(
        "kernels",
        ("Profile.kernels", "Profile.kinds"),
        lambda p, out, o: print_kernels(p, out, o.rows),
    ),
    Section(
        "device work", ("Profile.device_work",), lambda p, out, o: print_device_work(p, out, o.rows)
    ),
    Section("launches", ("Profile.launches",), lambda p, out, o: print_launches(p, out, o.rows)),
    Section("memory", ("Profile.memory",), lambda p, out, o: print_allocator(p, out, o.rows)),
    Section("breakdown", ("Profile.breakdown",), lambda p, out, o: print_breakdown(p, out)),
    Section(
        "communication",
        ("Profile.communication",),
        lambda p, out, o: print_communication(p, out, o.rows),
    ),
    Section("queues", ("Profile.queues",), lambda p, out, o: print_queues(p, out)),
    Section(
        "memory timeline",
        ("Profile.memory_timeline",),
        lambda p, out, o: print_memory_timeline(p, out),
    ),
    Section("operators", ("Profile.ops",), _ops),
    # the diagnosis reads the passes check (and every other section) into findings
    Section("findings", ("Profile.passes",), _findings),
)


# ---------------------------------------------------------------- a run


def _rank_reports(run: Run, out: Console, o: ReportOptions) -> None:
    """Every rank's report (one, beyond ``FULL_REPORTS`` ranks); findings come at the end."""
    each = replace(o, findings=False)
    for p in reported_ranks(run, out):
        print_rank_rule(p, out)
        print_sections(PROFILE_SECTIONS, p, out, each)


def _run_findings(run: Run, out: Console, o: ReportOptions) -> None:

    if o.findings:
        print_findings(diagnose_run(run), out, checks=run_checks(run))


RUN_SECTIONS: tuple[Section[Run], ...] = (
    Section("run header", ("Run.notes",), lambda r, out, o: print_run_header(r, out)),
    Section("rank reports", ("Run.ranks",), _rank_reports),
    Section(
        "ranks side by side",
        ("Run.cross", "Run.stragglers"),
        lambda r, out, o: print_ranks(r, out, o.rows),
    ),
    Section(
        "layers across ranks",
        ("Run.layer_ranks",),
        lambda r, out, o: print_layers_across_ranks(r, out, o.rows),
    ),
    Section("findings", (), _run_findings),
)


# ---------------------------------------------------------------- a diff


def _diff(d: Diff, out: Console, o: ReportOptions) -> None:
    # here, not at the top: only a diff's report creates the diff's types
    from layerprof.render.console.diff import print_diff

    print_diff(d, out, top=o.top or 20, gate=o.gate)


DIFF_SECTIONS: tuple[Section[Diff], ...] = (
    Section(
        "diff",
        # the gate is the one the caller passes: `report` passes a saved diff's own
        ("Diff.base_meta", "Diff.new_meta", "Diff.latency", "Diff.steps", "Diff.phases",
         "Diff.layers", "Diff.ops", "Diff.gate_result"),
        _diff,
    ),
)  # fmt: skip


def print_sections(
    sections: tuple[Section[T], ...], obj: T, console: Console, options: ReportOptions
) -> None:
    """Each section of ``sections`` in order, control characters escaped (most
    printers escape on their own as well: escaping twice changes nothing)."""
    with escaping(console) as out:
        for section in sections:
            section.print(obj, out, options)
