"""Every file a command reads, found before anything runs, so that no output replaces one.

The main argument is not the only input: ``--input @batch.pt``, the source of the
``--arch``/``--loss`` module and each trace a directory or glob lists are read too
(``run --input @x.pt --csv x.pt`` would otherwise replace the batch). Nothing here
imports torch or the user's code: a module's file is found as ``import`` would find
it, through the import system's finders, without executing a parent package.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import os
import sys
from collections.abc import Iterable
from importlib.machinery import ModuleSpec

from layerprof.errors import LayerprofError


def model_inputs(args: argparse.Namespace) -> list[str]:
    """The files ``run``/``sweep`` (or a ``diff --run`` side) read: the model file, each
    ``--input @file`` and the ``--arch``/``--loss`` module's source."""
    found = [getattr(args, "model", None)]
    found += input_files(getattr(args, "input", None) or ())
    found += [
        module_file(spec) for spec in (getattr(args, "arch", None), getattr(args, "loss", None))
    ]
    return [path for path in found if path]


def input_files(specs: Iterable[str]) -> list[str]:
    """The files named by ``--input @file`` specs (a spec that does not parse names none:
    the command refuses it later, with its own message)."""
    from layerprof.load.inputs import parse_input_spec

    files = []
    for text in specs:
        try:
            spec = parse_input_spec(text)
        except LayerprofError:
            continue
        if spec.file:
            files.append(spec.file)
    return files


def module_file(spec: str | None) -> str | None:
    """The source file of an ``--arch``/``--loss`` spec's module (``pkg.mod:fn`` or
    ``path/file.py:fn``), or None when it is not found or has no file (built-in)."""
    if not spec:
        return None
    text = spec.strip()
    name = text.rpartition(":")[0] if ":" in text else text.rpartition(".")[0]
    if not name:
        return None
    if name.endswith(".py"):
        return name
    found = _find_module(name)
    return found.origin if found is not None and found.has_location else None


def _find_module(name: str) -> ModuleSpec | None:
    """``name``'s spec, found package by package as ``import`` would (the current directory
    first, as ``--arch`` imports it) without running any package's ``__init__``."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        return getattr(loaded, "__spec__", None)
    found: ModuleSpec | None = None
    path: list[str] | None = None
    parts = name.split(".")
    for i in range(len(parts)):
        found = _find_spec(".".join(parts[: i + 1]), path)
        if found is None:
            return None
        locations = found.submodule_search_locations
        path = list(locations) if locations is not None else None
        if path is None and i < len(parts) - 1:
            return None  # a module, not a package, before the last part
    return found


def _find_spec(name: str, path: list[str] | None) -> ModuleSpec | None:
    search = path if path is not None else _top_level_path()
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        where = search if finder is importlib.machinery.PathFinder else path
        try:
            found = find(name, where)
        except (ImportError, OSError, ValueError):
            continue
        if found is not None:
            return found  # type: ignore[no-any-return]
    return None


def _top_level_path() -> list[str]:
    cwd = os.getcwd()
    return sys.path if cwd in sys.path or "" in sys.path else [cwd, *sys.path]


def trace_inputs(spec: str) -> list[str]:
    """``spec`` and, for a local directory or glob, every trace file it lists (``analyze
    dir --json dir/t.rank-0.json`` would replace a rank). A URL is not a local file; a
    listing that fails names nothing more (the command reports it when it reads)."""
    from layerprof.trace.jobs.remote import is_url, list_inputs

    if is_url(spec):
        return []
    try:
        listed = list_inputs(spec)
    except (LayerprofError, OSError):
        return [spec]
    return [spec, *(source.location for source in listed)]
