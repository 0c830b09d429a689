"""Model files and ``--arch`` specs -> a runnable model, safely.

What :func:`load_model` accepts, decided in this order:

* no file, ``arch`` only: the callable builds the model (random weights);
* a TorchScript archive (zip with ``code/`` and ``constants.pkl``): ``torch.jit.load``;
* a ``torch.export`` archive (``.pt2``): ``torch.export.load(...).module()``, after
  :func:`layerprof.load.archive.check_export_archive` found no string in its JSON that
  torch would evaluate as Python other than the shape expressions torch writes;
* any other ``torch.save`` file, read with ``weights_only=True`` (no code from the
  file runs): a state dict, or a checkpoint dict holding one under
  ``state_dict`` / ``model_state_dict`` / ``model`` / ``module``, loaded into the
  ``arch`` model with strict key matching. ``module.`` (DataParallel/DDP) and
  ``_orig_mod`` (``torch.compile``) prefixes are stripped;
* a whole pickled ``nn.Module``: refused unless ``trust_pickle=True``, because
  unpickling it imports and runs code named by the file.

Every failure is a :class:`~layerprof.errors.ModelLoadError` that names the file
or spec. torch is imported inside functions only: the CLI starts without it.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from layerprof.errors import ModelLoadError
from layerprof.load.archive import check_export_archive
from layerprof.load.formats import checked_file, sniff_archive
from layerprof.load.messages import first_line
from layerprof.load.pickles import refused_globals, scan_torch_file
from layerprof.load.specs import ARCH_EXAMPLE, build_arch, ensure_cwd_on_path
from layerprof.load.weights import CHECKPOINT_KEYS, find_state_dict, load_weights
from layerprof.pivot.notes import Note

__all__ = ["LoadedModel", "load_model"]

_ModelKind = Literal["eager", "torchscript", "export"]


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to run, and where it came from.

    ``module`` is an ``nn.Module`` (eager or the graph module of an exported
    program) or a ``torch.jit.ScriptModule``. ``program`` holds the
    ``torch.export.ExportedProgram`` for ``kind == "export"``, else ``None``.
    ``notes`` are facts worth showing the user (non-strict counts, stripped
    prefixes, ignored options).
    """

    module: Any
    kind: _ModelKind
    name: str
    source: str
    notes: tuple[Note, ...] = ()
    program: Any = field(default=None, compare=False)


def load_model(
    path: str | os.PathLike[str] | None,
    *,
    arch: str | None = None,
    arch_kwargs: Mapping[str, Any] | None = None,
    strict: bool = True,
    trust_pickle: bool = False,
    map_location: str = "cpu",
) -> LoadedModel:
    """Turn a model file and/or an ``arch`` spec into a :class:`LoadedModel`."""
    if path is None:
        if arch is None:
            raise ModelLoadError(
                "no model given: pass a model file, --arch, or both",
                hint=f"to profile random weights: {ARCH_EXAMPLE}",
            )
        model = build_arch(arch, arch_kwargs)
        return LoadedModel(model, "eager", type(model).__name__, f"{arch} (random weights)")
    file = checked_file(path)
    kind = sniff_archive(file)
    if kind == "torchscript":
        return _load_torchscript(file, arch, map_location)
    if kind == "export":
        return _load_exported(file, arch, trust_pickle=trust_pickle)
    obj = _torch_load(file, trust_pickle=trust_pickle, map_location=map_location)
    return _from_loaded_object(obj, file, arch, arch_kwargs, strict=strict)


def _load_torchscript(file: Path, arch: str | None, map_location: str) -> LoadedModel:
    import torch

    try:
        module = torch.jit.load(str(file), map_location=map_location)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise ModelLoadError(f"cannot load TorchScript archive {file}: {first_line(exc)}") from exc
    name = str(getattr(module, "original_name", "") or file.stem)
    return LoadedModel(module, "torchscript", name, f"torchscript {file}", _ignored_arch(arch))


def _load_exported(file: Path, arch: str | None, *, trust_pickle: bool = False) -> LoadedModel:
    import torch

    # Before torch reads it: shape expressions, guards and names from the archive end
    # up in Python that torch evaluates (sympify, exec of the code it generates).
    check_export_archive(file, trust_code=trust_pickle)
    guard = contextlib.nullcontext() if trust_pickle else _pickles_refused()
    try:
        with guard:
            program = torch.export.load(str(file))
        _check_example_keys(program, file)
        module = program.module()
    except ModelLoadError:
        raise
    except _PickleInArchiveError as exc:
        raise _pickle_refused(file, "its weights or constants are pickled") from exc
    except Exception as exc:
        if not trust_pickle and _is_unpickling_error(exc):
            raise _pickle_refused(file, "its weights or constants are pickled") from exc
        raise ModelLoadError(f"cannot load torch.export program {file}: {first_line(exc)}") from exc
    _allow_mode_calls(module)
    notes = (
        *_ignored_arch(arch),
        Note(
            "export-mode-fixed",
            "exported program: its train/eval behaviour was fixed at export time",
        ),
    )
    return LoadedModel(module, "export", file.stem, f"torch.export {file}", notes, program=program)


# What torch may paste into the guard code module() generates: L['x'][0]['mask'].
_KEY_PATH = re.compile(r"(?:\[(?:[0-9]+|'[A-Za-z_][A-Za-z0-9_]*')\]|\.[A-Za-z_][A-Za-z0-9_]*)*")


def _check_example_keys(program: Any, file: Path) -> None:
    """``ExportedProgram.module()`` writes a guard per example input, naming it by
    its pytree path (``L['d']['inner'].size()[0] == 3``) inside Python it runs; a
    dict key of the archive's example inputs is text the file chose."""
    from torch.utils import _pytree as pytree

    example = getattr(program, "example_inputs", None)
    if not example:
        return
    for path, _ in pytree.tree_flatten_with_path(example)[0]:
        text = pytree.keystr(path)
        if not _KEY_PATH.fullmatch(text):
            raise ModelLoadError(
                f"{file}: refused: example input {text[:80]} is not a plain name or index;"
                " torch would paste it into the guard code it runs",
                hint="this file was crafted or damaged; re-export the model with torch.export.save",
            )


class _PickleInArchiveError(Exception):
    """A .pt2 archive asked for a full unpickle (pickled weights or opaque objects)."""


def _is_unpickling_error(exc: BaseException) -> bool:
    import pickle

    while exc is not None:
        if isinstance(exc, (pickle.UnpicklingError, _PickleInArchiveError)):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


@contextlib.contextmanager
def _pickles_refused() -> Iterator[None]:
    """While torch.export.load runs, no full unpickle: ``torch.load`` is forced to
    ``weights_only=True`` and the archive reader's plain ``pickle.loads`` refuses.

    ``torch.export.load`` itself calls ``torch.load(..., weights_only=False)`` for
    weights saved pickled and ``pickle.loads`` for opaque objects, so a crafted
    .pt2 file could otherwise run code without ``--trust-pickle``.
    """
    import torch

    original_load = torch.load

    def weights_only_load(*args: Any, **kwargs: Any) -> Any:
        kwargs["weights_only"] = True
        return original_load(*args, **kwargs)

    class _NoPickle:
        @staticmethod
        def loads(*args: Any, **kwargs: Any) -> Any:
            raise _PickleInArchiveError("the archive holds pickled objects")

    archive: Any
    try:
        from torch.export.pt2_archive import _package as archive
    except ImportError:  # older torch: no such reader, torch.load covers it
        archive = None
    saved_pickle = getattr(archive, "pickle", None)
    torch.load = weights_only_load
    if saved_pickle is not None:
        archive.__dict__["pickle"] = _NoPickle
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's unpickler chatter: the refusal says it
            yield
    finally:
        torch.load = original_load
        if saved_pickle is not None:
            archive.__dict__["pickle"] = saved_pickle


def _allow_mode_calls(module: Any) -> None:
    """Let ``train()``/``eval()`` on an exported module set the flag and do nothing else.

    ``ExportedProgram.module()`` plants instance methods that raise, because the
    graph cannot change mode. Runners call ``eval()`` and restore the mode
    afterwards; dropping the planted methods makes those calls flag-only
    (the inherited ``nn.Module`` ones) and leaves the graph's ops as exported.
    """
    for name in ("train", "eval"):
        if name in vars(module):
            delattr(module, name)


def _ignored_arch(arch: str | None) -> tuple[Note, ...]:
    if not arch:
        return ()
    text = f"--arch {arch} ignored: the file holds the whole model"
    return (Note("arch-ignored", text, {"arch": arch}),)


def _torch_load(file: Path, *, trust_pickle: bool, map_location: str) -> Any:
    import torch

    try:
        return torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        refusal = _refusal(file, exc)
        if refusal is None:
            raise _unreadable(file, exc) from exc
        if not trust_pickle:
            raise refusal from None
    except Exception as exc:
        raise _unreadable(file, exc) from exc
    return _trusted_load(file, map_location)


def _refusal(file: Path, exc: Exception) -> ModelLoadError | None:
    """Why weights_only refused ``file`` when it was for safety; None when the file
    is damaged. Told from the stream's own opcodes, not from torch's wording."""

    scan = scan_torch_file(file)
    refused = refused_globals(scan)
    if refused:
        return _pickle_refused(file, f"it contains {refused[0]}")
    if scan.complete:  # whole, names nothing foreign: refused for another reason
        return _pickle_refused(file, f"torch's weights_only loader says: {_weights_reason(exc)}")
    return None


def _weights_reason(exc: Exception) -> str:
    # torch wraps the reason in paragraphs of advice; keep its one line.
    for line in str(exc).splitlines():
        if "WeightsUnpickler error:" in line:
            return line.split("WeightsUnpickler error:", 1)[1].strip()
    return first_line(exc)


def _unreadable(file: Path, exc: Exception) -> ModelLoadError:
    if isinstance(exc, (EOFError, pickle.UnpicklingError)):
        reason = "damaged pickle stream (truncated?)"
    else:
        reason = first_line(exc)
    return ModelLoadError(f"{file} is not a readable torch file: {reason}")


def _pickle_refused(file: Path, detail: str | None = None) -> ModelLoadError:
    what = f" ({detail})" if detail else ""
    return ModelLoadError(
        f"{file} was refused: it is not plain weights{what}, and loading it means"
        " unpickling, which runs code named by the file",
        hint="if you trust this file, pass --trust-pickle; better, save a state_dict "
        "and load it with --arch",
    )


def _trusted_load(file: Path, map_location: str) -> Any:
    import torch

    # A pickled module refers to its class by import path; make the user's
    # code next to them importable, as for --arch.
    ensure_cwd_on_path()
    try:
        return torch.load(file, map_location=map_location, weights_only=False)
    except (ImportError, AttributeError) as exc:
        raise ModelLoadError(
            f"{file} refers to code that cannot be imported: {first_line(exc)}",
            hint="run from the directory that holds the model's module, or set PYTHONPATH",
        ) from exc
    except Exception as exc:
        raise ModelLoadError(f"cannot unpickle {file}: {first_line(exc)}") from exc


def _from_loaded_object(
    obj: Any,
    file: Path,
    arch: str | None,
    arch_kwargs: Mapping[str, Any] | None,
    *,
    strict: bool,
) -> LoadedModel:
    whole = _whole_module(obj)
    if whole is not None:
        module, where = whole
        return LoadedModel(
            module,
            _module_kind(module),
            type(module).__name__,
            f"pickled module {file}{where}",
            _ignored_arch(arch),
        )
    state, where = find_state_dict(obj, file)
    if arch is None:
        raise ModelLoadError(
            f"{file} holds a state_dict{where} ({len(state)} tensors), not a model: "
            "--arch is needed to build the model it belongs to",
            hint=ARCH_EXAMPLE,
        )
    model = build_arch(arch, arch_kwargs)
    notes = load_weights(model, state, file=file, arch=arch, strict=strict)
    source = f"state_dict {file}{where} -> {arch}"
    return LoadedModel(model, "eager", type(model).__name__, source, notes)


def _whole_module(obj: Any) -> tuple[Any, str] | None:
    """A pickled module, bare or under a checkpoint key (``{"model": module}``)."""
    from torch import nn

    if isinstance(obj, nn.Module):
        return obj, ""
    if isinstance(obj, Mapping):
        for key in CHECKPOINT_KEYS:
            if isinstance(obj.get(key), nn.Module):
                return obj[key], f"[{key!r}]"
    return None


def _module_kind(module: Any) -> _ModelKind:
    import torch

    return "torchscript" if isinstance(module, torch.jit.ScriptModule) else "eager"
