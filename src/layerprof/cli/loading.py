"""The model of ``run`` and ``sweep``: a MODEL file and/or ``--arch``, checked before
a long load (a missing ``--input`` fails first unless a .pt2 program brings its own)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from layerprof.errors import UsageError


def load(args: argparse.Namespace) -> Any:
    """The model of ``run``/``sweep`` (MODEL file and/or --arch), checked before a long load."""
    import json

    from layerprof.load.model import load_model

    if not args.model and not args.arch:
        raise UsageError(
            "give a MODEL file, --arch MODULE:CALLABLE, or both",
            hint=f"see layerprof {args.command} --help",
        )
    kwargs = None
    if args.arch_kwargs:
        try:
            kwargs = json.loads(args.arch_kwargs)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--arch-kwargs is not valid JSON: {exc.msg}") from exc
        if not isinstance(kwargs, dict):
            raise UsageError("--arch-kwargs must be a JSON object, e.g. '{\"depth\": 18}'")
    # fail before a long load unless the file is an export archive carrying example inputs
    if not args.input and not _is_export_archive(args.model):
        raise _no_input()
    loaded = load_model(
        args.model, arch=args.arch, arch_kwargs=kwargs, strict=not args.non_strict,
        trust_pickle=args.trust_pickle, map_location="cpu",
    )  # fmt: skip
    if not args.input and loaded.kind != "export":
        raise _no_input()
    return loaded


def _is_export_archive(model: str | None) -> bool:
    """Told by the file's content, never its name (a .pt2 renamed .pth is one)."""
    from layerprof.load.formats import torch_file_format

    if model is None or not Path(model).is_file():
        return False
    try:
        return torch_file_format(Path(model)) == "export"
    except OSError:
        return True  # let the loader report the unreadable file


def _no_input() -> UsageError:
    return UsageError(
        "no --input given", hint="e.g. --input 1x3x224x224 (repeat for more arguments)"
    )
