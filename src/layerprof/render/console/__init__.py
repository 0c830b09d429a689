"""The terminal report of a Profile, a Run, a Diff or a Sweep.

Each section of ``sections.py`` (``PROFILE_SECTIONS``, ``RUN_SECTIONS``,
``DIFF_SECTIONS``) prints one part of the report from the typed objects; tables
fit the console without cutting a number (``columns.py``) and every printer goes
through ``render/terminal.py``'s escaping, so a name cannot move the cursor. It
reads the pivot and the analyses only: no torch, no capture or trace internals,
nothing of ``render/html``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

from layerprof.errors import UsageError
from layerprof.pivot.profile import Profile, Run

if TYPE_CHECKING:
    from layerprof.pivot.diff import Diff
    from layerprof.pivot.sections.sweep import Sweep
    from layerprof.render.console.sections import ReportOptions

__all__ = ["print_report"]


def print_report(obj: Profile | Run | Diff | Sweep, console: Console, **options: Any) -> None:
    """The whole terminal report of ``obj`` (``options``: ``sections.ReportOptions``' fields)."""
    # the section registry loads every printer: here, not at the package's import, so
    # that one printer's module (``history show``'s) does not load them all (~0.1 s)
    from layerprof.render.console.sections import (
        PROFILE_SECTIONS,
        RUN_SECTIONS,
        ReportOptions,
        print_sections,
    )

    opts = ReportOptions.of(options)
    if isinstance(obj, Profile):
        print_sections(PROFILE_SECTIONS, obj, console, opts)
    elif isinstance(obj, Run):
        print_sections(RUN_SECTIONS, obj, console, opts)
    else:
        _print_other(obj, console, opts)


def _print_other(obj: Diff | Sweep, console: Console, opts: ReportOptions) -> None:
    # the diff's and the sweep's types here, not at the top: a profile's or a trace's
    # report never creates them (each dataclass costs ~1 ms of start-up)
    from layerprof.pivot.diff import Diff
    from layerprof.pivot.sections.sweep import Sweep  # the same
    from layerprof.render.console.sections import DIFF_SECTIONS, print_sections

    if isinstance(obj, Diff):
        print_sections(DIFF_SECTIONS, obj, console, opts)
    elif isinstance(obj, Sweep):
        from layerprof.render.console.sweep import print_sweep

        print_sweep(obj, console)
    else:
        raise UsageError(f"the console format cannot show a {type(obj).__name__}")
