"""The console and the HTML report show the same typed sections, or say why not.

Each renderer lists its sections in a registry (``render/console/sections.py``,
``render/html/sections.py``) with the typed fields of a Profile, a Run or a Diff
each one shows. A typed field is one whose value is a value object (a dataclass,
or a tuple of them) or a ``Series``: scalars and strings (a diff's threshold, a
run's notes) are parameters or lines, not sections. A new section added to one
renderer only fails here until the other shows it too or ``ABSENT`` says why.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import types
import typing
from collections.abc import Iterable

import layerprof.pivot.sections
from layerprof.pivot.diff import Diff
from layerprof.pivot.profile import Profile, Run, TraceSections
from layerprof.render.console import sections as console
from layerprof.render.html import sections as html
from layerprof.stats import Series

RESULT_TYPES: tuple[type, ...] = (Profile, Run, Diff)

#: Typed fields shown by only one renderer (or none), with the renderers lacking them.
ABSENT: dict[str, frozenset[str]] = {
    # The user's record_function ranges can be many long names: the terminal report
    # keeps to the tables that rank time; the HTML report (filterable) and the JSON list them.
    "Profile.annotations": frozenset({"console"}),
    # The HTML report does not list input signatures yet: the console's header line
    # and the JSON's 'signatures' are the only views (a gap, not a choice).
    "Profile.signatures": frozenset({"html"}),
    # The terminal diff stays at steps, layers and operators; kernel changes are in
    # the HTML report, the JSON and (summed) in the operator rows.
    "Diff.kernels": frozenset({"console"}),
    # One set of medians per process (run --repeat): the input of `diff`'s
    # between-run test, which both renderers show as the diff's evidence.
    "Profile.repeats": frozenset({"console", "html"}),
}


def _inner(hint: object) -> list[object]:
    """The types inside ``X | None`` and ``tuple[X, ...]``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return [t for a in args if a is not type(None) for t in _inner(a)]
    if origin is tuple:
        return _inner(args[0])
    return [hint]


def typed_sections() -> set[str]:
    """Typed fields by ``Type.field``; a Profile's trace sections (one ``TraceSections``
    value, read as attributes of the Profile) by ``Profile.<section>``."""
    out = set()
    for cls in RESULT_TYPES:
        out |= _typed_fields(cls, cls.__name__)
    return out


def _section_names() -> dict[str, object]:
    """Every name of the section modules: the pivot imports them for type checking
    only (they are created on first use), so the hints resolve against these."""
    package = layerprof.pivot.sections
    modules = [
        importlib.import_module(f"{package.__name__}.{m.name}")
        for m in pkgutil.iter_modules(package.__path__)
    ]
    return {name: getattr(m, name) for m in modules for name in dir(m)}


def _typed_fields(cls: type, owner: str) -> set[str]:
    out = set()
    hints = typing.get_type_hints(cls, localns=_section_names())
    for field in dataclasses.fields(cls):
        kinds = _inner(hints[field.name])
        if TraceSections in kinds:
            out |= _typed_fields(TraceSections, owner)
        elif any(t is Series or dataclasses.is_dataclass(t) for t in kinds):
            out.add(f"{owner}.{field.name}")
    return out


def console_renders() -> set[str]:
    registries: Iterable[tuple[console.Section[typing.Any], ...]] = (
        console.PROFILE_SECTIONS,
        console.RUN_SECTIONS,
        console.DIFF_SECTIONS,
    )
    return {name for sections in registries for s in sections for name in s.renders}


def html_renders() -> set[str]:
    return set(html.HEADER_RENDERS) | {name for s in html.SECTIONS for name in s.renders}


def gaps(shown: dict[str, set[str]], absent: dict[str, frozenset[str]]) -> list[str]:
    """Typed fields whose renderers differ from what ``absent`` says, and stale entries."""
    problems = []
    for name in sorted(typed_sections()):
        lacking = frozenset(r for r, names in shown.items() if name not in names)
        if lacking != absent.get(name, frozenset()):
            problems.append(f"{name}: not shown by {sorted(lacking) or 'nothing'}")
    for name in sorted(set(absent) - typed_sections()):
        problems.append(f"{name}: listed in ABSENT but not a typed section")
    return problems


def test_the_typed_sections_are_the_ones_expected() -> None:
    """The rule that picks them finds the sections (a change of rule shows up here)."""
    found = typed_sections()
    assert {"Profile.steps", "Profile.latency_ns", "Run.stragglers", "Diff.layers"} <= found
    assert "Profile.notes" in found  # typed Note values since notes stopped being prose
    assert not {"Profile.events", "Diff.threshold_pct", "Run.path"} & found


def test_every_registration_names_a_typed_section() -> None:
    known = typed_sections()
    assert console_renders() <= known, sorted(console_renders() - known)
    assert html_renders() <= known, sorted(html_renders() - known)


def test_both_renderers_show_every_typed_section_or_say_why_not() -> None:
    shown = {"console": console_renders(), "html": html_renders()}
    assert not gaps(shown, ABSENT), "\n".join(gaps(shown, ABSENT))


def test_a_section_missing_from_one_renderer_is_caught() -> None:
    """Taking any one registration away from either renderer makes the check fail."""
    for renderer in ("console", "html"):
        shown = {"console": console_renders(), "html": html_renders()}
        for name in sorted(shown[renderer]):
            fewer = {**shown, renderer: shown[renderer] - {name}}
            assert gaps(fewer, ABSENT), f"{name} taken from {renderer} went unnoticed"


#: Typed Profile fields the profile body writes itself, around the registered sections.
BODY_FIELDS = frozenset(
    f"Profile.{x}" for x in ("meta", "latency_ns", "overhead", "layers", "ops", "notes")
)


def test_the_codec_writes_and_reads_every_typed_section() -> None:
    """The codec's registry (``codec/sections.py``) covers every typed Profile field the
    body does not write itself: a new section saved by no one fails here."""
    from layerprof.codec import sections as codec

    covered = {name for entry in codec.SECTIONS for name in entry.fields}
    typed = {name for name in typed_sections() if name.startswith("Profile.")}
    assert sorted(typed - covered - BODY_FIELDS) == []
    assert sorted(covered - typed) == []  # no stale entry
    assert not covered & BODY_FIELDS
