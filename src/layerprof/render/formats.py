"""The renderers by name: small adapters that give every output format one protocol.

Each has a ``name``, the file ``extensions`` it writes and
``render(obj, **options) -> str | bytes``; ``layerprof.sinks`` picks one by
name (``--format md``) or by the output file's extension, and the pivot types'
``write``/``print`` conveniences go through it. Importing this module
registers them all.
"""

from __future__ import annotations

import io
from typing import Any

import orjson

from layerprof import sinks
from layerprof.errors import UsageError
from layerprof.pivot.profile import Profile, Run
from layerprof.render.table import profile_to_csv


def _unsupported(fmt: str, obj: Any) -> UsageError:
    return UsageError(f"the {fmt} format cannot show a {type(obj).__name__}")


class ConsoleRenderer:
    """The terminal report: the layer tree, operators and findings; a trace's tables; a diff."""

    name = "console"
    extensions: tuple[str, ...] = (".txt",)

    def print(self, obj: Any, *, console: Any = None, **options: Any) -> None:
        from layerprof.render.console import print_report
        from layerprof.render.terminal import make_console

        print_report(obj, console or make_console(), **options)

    def render(self, obj: Any, *, width: int | None = 120, **options: Any) -> str:
        """The report as text, ``width`` columns wide (None: as wide as ``.print()`` lays
        it out: the terminal, $COLUMNS, or ``PIPE_WIDTH`` in a pipe)."""
        from rich.console import Console

        if width is None:
            from layerprof.render.terminal import output_width

            width = output_width()

        console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
        self.print(obj, console=console, **options)
        return console.export_text()


class _JsonRenderer:
    """The layerprof JSON documents (``layerprof.profile/2``, ``trace/2``, ``diff/1``)."""

    name = "json"
    extensions: tuple[str, ...] = (".json",)

    def render(self, obj: Any, *, samples: bool = False, **options: Any) -> bytes:
        # imported when a JSON is written, not for every terminal report
        from layerprof.codec import dumps

        return dumps(obj, samples=samples, **options)


class _CsvRenderer:
    """One line per layer (a Profile)."""

    name = "csv"
    extensions: tuple[str, ...] = (".csv",)

    def render(self, obj: Any, **options: Any) -> str:

        if not isinstance(obj, Profile):
            raise _unsupported(self.name, obj)
        return profile_to_csv(obj)


class HtmlRenderer:
    """The self-contained offline HTML report of a Profile, a Run or a Diff (with the
    diagnosis' findings, and a diff's gate), or of a Sweep."""

    name = "html"
    extensions: tuple[str, ...] = (".html", ".htm")

    def render(
        self, obj: Any, *, title: str | None = None, gate: Any = None, **options: Any
    ) -> str:
        # the diff's and the sweep's types here, not at the top: a terminal report of a
        # trace never creates them (each dataclass costs ~1 ms of start-up)
        from layerprof.pivot.diff import Diff
        from layerprof.pivot.sections.sweep import Sweep  # the same
        from layerprof.render.html import render_html

        if isinstance(obj, Sweep):
            from layerprof.render.html.sweep import render_sweep_html

            return render_sweep_html(obj, title=title)
        if not isinstance(obj, Profile | Run | Diff):
            raise _unsupported(self.name, obj)
        return render_html(obj, title=title, gate=gate)


class _MarkdownRenderer:
    """A diff as Markdown, for a pull-request comment."""

    name = "md"
    extensions: tuple[str, ...] = (".md",)

    def render(self, obj: Any, *, top: int = 20, gate: Any = None, **options: Any) -> str:
        from layerprof.pivot.diff import Diff  # see HtmlRenderer.render
        from layerprof.render.markdown import diff_to_markdown

        if not isinstance(obj, Diff):
            raise _unsupported(self.name, obj)
        return diff_to_markdown(obj, top=top, gate=gate)


class _FoldedRenderer:
    """Layer self times as folded stacks (flamegraph.pl)."""

    name = "folded"
    extensions: tuple[str, ...] = (".folded", ".stacks")

    def render(self, obj: Any, **options: Any) -> str:
        from layerprof.render.stacks import folded_lines

        if not isinstance(obj, Profile):
            raise _unsupported(self.name, obj)
        return "".join(line + "\n" for line in folded_lines(obj))


class _SpeedscopeRenderer:
    """The layer tree as a speedscope profile."""

    name = "speedscope"
    extensions: tuple[str, ...] = (".speedscope.json",)

    def render(self, obj: Any, **options: Any) -> bytes:
        from layerprof.render.stacks import speedscope_document

        if not isinstance(obj, Profile):
            raise _unsupported(self.name, obj)
        return orjson.dumps(speedscope_document(obj))


class _ChromeRenderer:
    """The recorded Kineto trace with layer lanes (Chrome/Perfetto), from an ops-mode Profile."""

    name = "trace"
    extensions: tuple[str, ...] = (".pt.trace.json", ".trace.json", ".json.gz")

    def render(self, obj: Any, **options: Any) -> bytes:
        from layerprof.render.chrome import trace_bytes

        if not isinstance(obj, Profile) or obj.events is None:
            raise UsageError(
                "a Chrome/Perfetto trace needs the recorded operators", hint="profile with --ops"
            )
        data: bytes = trace_bytes(obj, gzip_it=bool(options.get("gzip")))
        return data


_RENDERERS: tuple[sinks.Renderer, ...] = (
    ConsoleRenderer(),
    _JsonRenderer(),
    _CsvRenderer(),
    HtmlRenderer(),
    _MarkdownRenderer(),
    _FoldedRenderer(),
    _SpeedscopeRenderer(),
    _ChromeRenderer(),
)
for _renderer in _RENDERERS:
    sinks.register(_renderer)
