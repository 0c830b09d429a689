"""Where pivot objects go: one registry of renderers, and the JSON codec's entry points.

A renderer is a small object with a ``name``, the file ``extensions`` it
writes, and ``render(obj, **options) -> str | bytes`` for the pivot types it
accepts (``Profile``, ``Run``, ``Diff``); ``write`` picks one by name or by
the output file's extension (like pyinstrument's renderers). The pivot types
offer ``save``/``load``/``print``/``render``/``write`` as conveniences that
call the functions below, so the pivot never imports a renderer: the package
registers them on first use (``layerprof/__init__`` hands :func:`on_first_use`
an import of ``layerprof.render``, whose modules call :func:`register`).

Saving and loading import the codec where they run (:func:`to_dict`, :func:`save`,
:func:`load`...): the one import from the pivot's layer up to the codec, inside a
function, that ``tests/test_architecture.py`` allows. They import the codec alone,
never rich or the HTML report.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from layerprof.errors import ProfileFormatError, UsageError
from layerprof.files import write_atomic

if TYPE_CHECKING:  # typing.Self is 3.11+; annotations are strings here, so 3.10 never needs it
    from typing_extensions import Self


class Renderer(Protocol):
    """A sink for pivot objects: ``render`` returns the whole output."""

    name: str
    extensions: tuple[str, ...]

    def render(self, obj: Any, **options: Any) -> str | bytes: ...


_RENDERERS: dict[str, Renderer] = {}


def register(renderer: Renderer) -> Renderer:
    """Make ``renderer`` available by its name and its extensions."""
    _RENDERERS[renderer.name] = renderer
    return renderer


def names() -> list[str]:
    return sorted(_RENDERERS)


def renderer(name: str) -> Renderer:
    """The renderer called ``name``; UsageError naming the known ones otherwise."""
    _ensure_registered()
    found = _RENDERERS.get(name)
    if found is None:
        raise UsageError(f"unknown output format {name!r}", hint="one of " + ", ".join(names()))
    return found


def _renderer_for(path: str | os.PathLike[str]) -> Renderer:
    """The renderer whose extension ends the file name (the longest match wins)."""
    _ensure_registered()
    name = Path(path).name.lower()
    best: tuple[int, Renderer] | None = None
    for r in _RENDERERS.values():
        for ext in r.extensions:
            if name.endswith(ext) and (best is None or len(ext) > best[0]):
                best = (len(ext), r)
    if best is None:
        known = sorted({e for r in _RENDERERS.values() for e in r.extensions})
        raise UsageError(
            f"cannot tell the output format of {path} from its name",
            hint="use one of the extensions " + ", ".join(known),
        )
    return best[1]


def render(obj: Any, fmt: str, **options: Any) -> str | bytes:
    return renderer(fmt).render(obj, **options)


def write(obj: Any, path: str | os.PathLike[str], fmt: str | None = None, **options: Any) -> Path:
    """Render ``obj`` (in ``fmt``, else by the file's extension) and write it whole or not at all."""

    chosen = renderer(fmt) if fmt is not None else _renderer_for(path)
    if str(path).endswith(".gz"):
        options.setdefault("gzip", True)
    return write_atomic(path, chosen.render(obj, **options))


def show(obj: Any, **options: Any) -> None:
    """Print ``obj``'s console report to the terminal."""
    console = renderer("console")
    printer = getattr(console, "print", None)
    if printer is None:  # pragma: no cover - the console renderer always has it
        raise UsageError("the console renderer cannot print")
    printer(obj, **options)


# The codec sits above the pivot (it reads and builds pivot objects): these import it
# where they run, the one upward import tests/test_architecture.py allows.


def to_dict(obj: Any, **options: Any) -> dict[str, Any]:
    from layerprof import codec  # upward, where it runs: see above

    return codec.to_dict(obj, **options)


def from_dict(data: Any, *, source: str) -> Any:
    from layerprof import codec  # upward, where it runs: see above

    return codec.from_dict(data, source=source)


def load(path: str | os.PathLike[str]) -> Any:
    from layerprof import codec  # upward, where it runs: see above

    return codec.load(path)


def save(obj: Any, path: str | os.PathLike[str], *, samples: bool = False) -> Path:
    """The JSON document of ``obj``, written whole or not at all (gzipped for ``.gz``)."""
    import gzip

    from layerprof import codec  # upward, where it runs: see above

    data = codec.dumps(obj, samples=samples)
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    return write_atomic(path, data)


def layer_records(profile: Any) -> list[dict[str, Any]]:
    from layerprof import codec  # upward, where it runs: see above

    return codec.layer_records(profile)


class Output:
    """What a pivot object (Profile, Run, Diff, ...) does with itself, through the registry:
    print its console report, render or write any format, load its own kind back."""

    def print(self, **options: Any) -> None:
        """The console report (options as for the matching command: depth, top, sort...)."""
        show(self, **options)

    def __str__(self) -> str:
        """The console report as text, as wide as ``.print()`` lays it out (the terminal's
        width; in a pipe or a file $COLUMNS or 160): ``print(obj)`` shows it."""
        return str(render(self, "console", width=None))

    def render(self, fmt: str, **options: Any) -> str | bytes:
        """This object in a format by name: ``console``, ``json``, ``csv``, ``html``, ``md``...
        Text formats are ``str`` (JSON too); only binary ones (gzip) are ``bytes``."""
        out = render(self, fmt, **options)
        if isinstance(out, bytes) and not out.startswith(b"\x1f\x8b"):
            return out.decode()  # orjson writes UTF-8 bytes: text like the other formats
        return out

    def _repr_html_(self) -> str:
        """Jupyter shows the HTML report inline, in a sandboxed frame of its own: the
        report's styles and scripts neither leak into the notebook nor rely on it, and
        the page is self-contained (no network)."""
        import html

        page = str(self.render("html"))
        return (
            f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts allow-downloads"'
            ' style="width:100%;height:720px;border:0" title="layerprof report"></iframe>'
        )

    def write(self, path: str | os.PathLike[str], **options: Any) -> Path:
        """Write in the format the file name says (``.html``, ``.csv``, ``.json``, ...)."""
        return write(self, path, **options)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Self:
        """A saved file of this kind (a ProfileFormatError for any other kind)."""
        return cls._expect(load(path), str(path))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<dict>") -> Self:
        return cls._expect(from_dict(data, source=source), source)

    @classmethod
    def _expect(cls, loaded: Any, source: str) -> Self:
        if not isinstance(loaded, cls):
            raise ProfileFormatError(
                f"{source} holds a {type(loaded).__name__}, not a {cls.__name__}"
            )
        return loaded


_REGISTRARS: list[Callable[[], None]] = []


def on_first_use(registrar: Callable[[], None]) -> None:
    """``registrar()`` fills the registry the first time it is needed: the package
    (``layerprof/__init__``) hands over an import of the renderers,
    so that importing layerprof (``--help``) does not pay for them."""
    _REGISTRARS[:] = [registrar]


def _ensure_registered() -> None:
    """Every renderer, registered on first use (any ``import layerprof.x``
    runs the package's ``__init__``, which hands over the registrar, first)."""
    if not _RENDERERS:
        for registrar in _REGISTRARS:
            registrar()
    if not _RENDERERS:  # pragma: no cover - a package import-order bug
        raise UsageError("layerprof's renderers are not registered yet (import layerprof)")
