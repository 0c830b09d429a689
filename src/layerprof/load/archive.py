"""Zip archives of model files, read with bounds before torch reads them.

A ``torch.export`` archive is JSON that torch turns back into Python objects,
and much of its text ends up in Python that torch evaluates:

* shape expressions (``expr_str``) go through ``sympy.sympify``, i.e. ``eval``;
* ``guards_code`` is pasted into a function that ``module()`` executes;
* value names (``name``, ``as_name``) and ``forward_arg_names`` become
  identifiers in the code FX generates for the graph (``def forward(self, x)``),
  and parameter paths (``parameter_name``, ``fqn``, ``target``...) are pasted
  inside quotes (``getattr(self.blocks, "conv-1")``);
* constant inputs (``graph.inputs[i].as_string``) are pasted into guards
  (``L['mode'] == 'add'``).

An AOTInductor package also carries a compiled shared library that
``torch.export.load`` would load. :func:`check_export_archive` reads every JSON
member itself, with bounded sizes, and refuses the archive before anything
deserializes it when any of these strings is not what torch writes
(:mod:`layerprof.load.symexpr` has the grammars).

Bounds: at most :data:`MAX_MEMBERS` members, no two with the same name (two
zip readers could pick different ones), JSON members up to
:data:`MAX_JSON_BYTES` each and :data:`MAX_JSON_TOTAL` together, judged by the
sizes the directory declares and enforced while reading (a zip bomb stops at
the bound). Pure Python; torch is not imported.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from layerprof.errors import ModelLoadError
from layerprof.load.symexpr import UnsafeExpression, check_guard, check_sym_expr, check_text

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_JSON_TOTAL",
    "MAX_MEMBERS",
    "check_export_archive",
    "member_names",
    "read_member",
]

MAX_MEMBERS = 100_000
MAX_JSON_BYTES = 256 * 2**20
MAX_JSON_TOTAL = 1024 * 2**20
_AOTI_DIR = "data/aotinductor/"
# torch.export.load reads these as plain strings and never parses them.
_EXTRA_DIRS = ("extra/", "extra_files/")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,999}")
_REEXPORT = "re-export the model with torch.export.save, or load the weights with --arch"


def member_names(archive: zipfile.ZipFile, file: Path) -> list[str]:
    """The member names, refusing archives too large to list or with duplicate names."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ModelLoadError(f"{file}: {len(infos)} archive members, more than {MAX_MEMBERS}")
    names = [info.filename for info in infos]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        # Readers disagree on which copy counts: refuse rather than check one and load another.
        raise ModelLoadError(f"{file}: the archive holds two members named {dup!r}")
    return names


def read_member(archive: zipfile.ZipFile, name: str, file: Path, limit: int) -> bytes:
    """A member's bytes, at most ``limit`` of them (declared and actual size both checked)."""
    info = archive.getinfo(name)
    if info.file_size > limit:
        raise ModelLoadError(
            f"{file}: archive member {name} is {info.file_size} bytes, more than {limit}"
        )
    try:
        with archive.open(info) as handle:
            data = handle.read(limit + 1)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise ModelLoadError(f"{file}: archive member {name} is damaged ({exc})") from exc
    if len(data) > limit:
        raise ModelLoadError(f"{file}: archive member {name} holds more than {limit} bytes")
    return data


def check_export_archive(file: Path, *, trust_code: bool = False) -> None:
    """Refuse a ``torch.export`` archive whose JSON would make torch run code.

    Checks every field listed in the module docstring against what torch writes,
    and refuses compiled AOTInductor code unless ``trust_code``. Raises
    :class:`ModelLoadError` naming the member and the field.
    """
    try:
        with zipfile.ZipFile(file) as archive:
            names = member_names(archive, file)
            if not trust_code:
                _refuse_compiled_code(names, file)
            total = 0
            for name in names:
                if not _parsed_by_torch(name):
                    continue
                data = read_member(archive, name, file, MAX_JSON_BYTES)
                total += len(data)
                if total > MAX_JSON_TOTAL:
                    raise ModelLoadError(
                        f"{file}: the archive's JSON members hold more than {MAX_JSON_TOTAL} bytes"
                    )
                _check_document(_parse_json(data, name, file), name, file)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ModelLoadError(f"{file} is a damaged zip archive ({exc})") from exc


def _refuse_compiled_code(names: list[str], file: Path) -> None:
    compiled = next((n for n in names if _AOTI_DIR in "/" + n), None)
    if compiled is not None:
        raise ModelLoadError(
            f"{file} is an AOTInductor package ({compiled}): loading it loads the compiled"
            " native code inside",
            hint="if you trust this file, pass --trust-pickle; better, "
            + _REEXPORT.replace("re-export", "export"),
        )


def _parsed_by_torch(name: str) -> bool:
    """Members torch parses as JSON: ``*.json`` and everything under ``models/``."""
    path = "/" + name
    if any(f"/{d}" in path for d in _EXTRA_DIRS):
        return False
    return name.lower().endswith(".json") or "/models/" in path


def _parse_json(data: bytes, name: str, file: Path) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelLoadError(f"{file}: archive member {name} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ModelLoadError(f"{file}: archive member {name} is nested too deeply") from None


def _check_document(doc: Any, name: str, file: Path) -> None:
    for path, key, value in _keyed_values(doc):
        check = _field_check(path, key)
        if check is None:
            continue
        what, checker = check
        try:
            checker(value)
        except UnsafeExpression as exc:
            raise ModelLoadError(
                f"{file}: refused: {name} field {_dotted(path)} is not {what} torch writes"
                f" ({exc}); torch would run it as Python",
                hint=f"this file was crafted or damaged; {_REEXPORT}",
            ) from None


def _field_check(path: tuple[str | int, ...], key: str) -> tuple[str, Callable[[Any], None]] | None:
    """The rule for one JSON field, by its key: every string torch evaluates or
    pastes into the Python code it generates for the graph has one."""
    if key == "expr_str":
        return "a shape expression", check_sym_expr
    if key == "guards_code":
        return "a shape guard", _check_guards
    if key in ("name", "as_name"):  # FX node names, pasted as Python identifiers
        return "a value name", _check_name
    if key == "forward_arg_names":  # pasted into 'def forward(self, ...)'
        return "an argument name", _check_names
    if key.endswith("_name") or key in ("fqn", "target", "class_fqn"):
        return "a name", check_text  # pasted inside quotes: getattr(self.blocks, "conv-1")
    if key in _CONSTANTS and path[-4:-2] == ("graph", "inputs"):
        return "a constant input", _CONSTANTS[key]  # pasted into a guard: L['mode'] == 'add'
    return None


def _check_guards(value: Any) -> None:
    if not isinstance(value, list):
        raise UnsafeExpression(f"a {type(value).__name__}, not a list of strings")
    for guard in value:
        check_guard(guard)


def _check_name(value: Any) -> None:
    if value != "" and not (isinstance(value, str) and _IDENTIFIER.fullmatch(value)):
        raise UnsafeExpression(f"{value!r} is not an identifier")


def _check_names(value: Any) -> None:
    if not isinstance(value, list):
        raise UnsafeExpression(f"a {type(value).__name__}, not a list of names")
    for item in value:
        _check_name(item)


def _check_typed(kind: type | tuple[type, ...]) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
            raise UnsafeExpression(f"{value!r} is not a {getattr(kind, '__name__', 'number')}")

    return check


_CONSTANTS: dict[str, Callable[[Any], None]] = {
    "as_string": check_text,
    "as_int": _check_typed(int),
    "as_float": _check_typed((int, float)),
    "as_bool": _check_typed(bool),
}


def _keyed_values(doc: Any) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
    """Every (path, key, value) under a dict key, iteratively (JSON can nest deep)."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                yield (*path, key), key, value
                stack.append(((*path, key), value))
        elif isinstance(node, list):
            stack.extend(((*path, i), item) for i, item in enumerate(node))


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + part
    return out
