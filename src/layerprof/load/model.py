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
import importlib
import importlib.util
import os
import pickle
import re
import sys
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from layerprof.errors import ModelLoadError

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from torch import nn

__all__ = [
    "CHECKPOINT_KEYS",
    "LoadedModel",
    "build_arch",
    "import_callable",
    "load_model",
    "torch_file_format",
]

ModelKind = Literal["eager", "torchscript", "export"]
FileFormat = Literal["torchscript", "export", "torch", "pickle", "damaged-zip", "other"]

#: Keys under which training checkpoints commonly keep the model weights.
CHECKPOINT_KEYS: tuple[str, ...] = ("state_dict", "model_state_dict", "model", "module")

_ARCH_EXAMPLE = "e.g. --arch mypkg.nets:ResNetish --arch-kwargs '{\"depth\": 18}'"
_SHOWN_KEYS = 5


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
    kind: ModelKind
    name: str
    source: str
    notes: tuple[str, ...] = ()
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
                hint=f"to profile random weights: {_ARCH_EXAMPLE}",
            )
        model = build_arch(arch, arch_kwargs)
        return LoadedModel(model, "eager", type(model).__name__, f"{arch} (random weights)")
    file = _checked_file(path)
    kind = _sniff_archive(file)
    if kind == "torchscript":
        return _load_torchscript(file, arch, map_location)
    if kind == "export":
        return _load_exported(file, arch, trust_pickle=trust_pickle)
    obj = _torch_load(file, trust_pickle=trust_pickle, map_location=map_location)
    return _from_loaded_object(obj, file, arch, arch_kwargs, strict=strict)


# ---------------------------------------------------------------- --arch specs


def import_callable(spec: str, option: str = "--arch") -> Callable[..., Any]:
    """Resolve ``module:attr`` (or ``path/to/file.py:attr``) to a callable.

    ``attr`` may be dotted (``Outer.build``). Without a colon the last dot
    separates module and attribute. The current directory goes on
    ``sys.path`` first, because users run layerprof next to their own code.
    ``option`` names the flag the spec came from in errors.
    """
    module_name, attr = _split_spec(spec, option)
    module = _import_module(module_name, spec, option)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ModelLoadError(
                f"{option} {spec}: module '{module_name}' has no attribute '{attr}'",
                hint=_attr_hint(module),
            ) from None
    if not callable(obj):
        raise ModelLoadError(
            f"{option} {spec}: '{attr}' is a {type(obj).__name__}, not a class or function"
        )
    return obj  # type: ignore[no-any-return]


def build_arch(spec: str, kwargs: Mapping[str, Any] | None = None) -> nn.Module:
    """Call the ``--arch`` callable with ``kwargs``; the result must be an ``nn.Module``."""
    from torch import nn

    factory = import_callable(spec)
    try:
        model = factory(**dict(kwargs or {}))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: the user's code is not ours to exit
        # The user's constructor failed: say which call, keep the cause for --debug.
        raise ModelLoadError(
            f"--arch {spec}: calling it{_kwargs_text(kwargs)} raised {_raised(exc)}",
            hint="check --arch-kwargs against the constructor's parameters",
        ) from exc
    if not isinstance(model, nn.Module):
        raise ModelLoadError(
            f"--arch {spec} returned {_type_name(model)}, not a torch.nn.Module",
            hint="point --arch at an nn.Module class or a function that returns one",
        )
    return model


def _split_spec(spec: str, option: str = "--arch") -> tuple[str, str]:
    text = spec.strip()
    if ":" in text:
        module_name, _, attr = text.rpartition(":")
    else:
        module_name, _, attr = text.rpartition(".")
    if not module_name or not attr:
        raise ModelLoadError(
            f"{option} {spec!r} is not of the form module:callable", hint=_ARCH_EXAMPLE
        )
    return module_name, attr


def _import_module(module_name: str, spec: str, option: str = "--arch") -> Any:
    _ensure_cwd_on_path()
    if module_name.endswith(".py"):
        return _import_file(Path(module_name), spec, option)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and not _is_package_of(exc.name, module_name):
            # The module was found but needs a package that is not installed.
            raise ModelLoadError(
                f"{option} {spec}: importing '{module_name}' needs '{exc.name}', "
                "which is not installed",
                hint=f"pip install the package that provides '{exc.name}'",
            ) from exc
        raise ModelLoadError(
            f"{option} {spec}: cannot import module '{module_name}' ({exc})",
            hint=f"run from the directory that holds it, or set PYTHONPATH; cwd is {Path.cwd()}",
        ) from exc
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a script that calls sys.exit() when imported
        raise ModelLoadError(
            f"{option} {spec}: importing '{module_name}' raised {_raised(exc)}"
        ) from exc


def _is_package_of(missing: str, module_name: str) -> bool:
    return module_name == missing or module_name.startswith(missing + ".")


def _import_file(file: Path, spec: str, option: str = "--arch") -> Any:
    if not file.is_file():
        raise ModelLoadError(f"{option} {spec}: no such file {file}")
    name = f"_layerprof_arch_{file.stem}"
    loader_spec = importlib.util.spec_from_file_location(name, file)
    if loader_spec is None or loader_spec.loader is None:
        raise ModelLoadError(f"{option} {spec}: cannot import {file}")
    module = importlib.util.module_from_spec(loader_spec)
    # Registered before exec so dataclasses/pickle inside the file can find it.
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except KeyboardInterrupt:
        del sys.modules[name]
        raise
    except BaseException as exc:
        del sys.modules[name]
        raise ModelLoadError(f"--arch {spec}: importing {file} raised {_raised(exc)}") from exc
    return module


def _ensure_cwd_on_path() -> None:
    # Kept (not removed after import): the user's module may import siblings
    # lazily during forward, exactly as it would under `python script.py`.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _attr_hint(module: Any) -> str | None:
    names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
    if not names:
        return None
    shown = ", ".join(sorted(names)[:8])
    return f"callables in {module.__name__}: {shown}" + (" ..." if len(names) > 8 else "")


# ------------------------------------------------------------------ file kinds


def _checked_file(path: str | os.PathLike[str]) -> Path:
    file = Path(path)
    if file.is_dir():
        raise ModelLoadError(f"model file {file} is a directory, not a file")
    if not file.exists():
        raise ModelLoadError(f"model file {file} does not exist")
    return file


def torch_file_format(file: Path) -> FileFormat:
    """Tell torch file kinds apart by their layout, before any unpickling.

    ``"torch"`` is a ``torch.save`` zip, ``"pickle"`` a legacy (pre-1.6)
    ``torch.save`` stream, ``"damaged-zip"`` a zip header without a readable
    directory (cut short in transfer), ``"other"`` anything else. Raises
    ``OSError`` when the file cannot be read.
    """
    if zipfile.is_zipfile(file):
        from layerprof.load.archive import member_names

        try:
            with zipfile.ZipFile(file) as archive:
                return _zip_kind(member_names(archive, file))
        except zipfile.BadZipFile:
            return "damaged-zip"
    with file.open("rb") as handle:
        head = handle.read(2)
    if head == b"PK":
        return "damaged-zip"
    # A pickle stream starts with the protocol opcode 0x80.
    return "pickle" if head[:1] == b"\x80" else "other"


def _sniff_archive(file: Path) -> FileFormat:
    try:
        kind = torch_file_format(file)
    except OSError as exc:
        raise ModelLoadError(f"cannot read model file {file}: {exc.strerror or exc}") from exc
    if kind == "damaged-zip":
        raise ModelLoadError(f"{file} is a damaged zip archive (truncated or corrupt?)")
    if kind == "other":
        raise ModelLoadError(
            f"{file} is not a torch file (neither a torch.save zip archive nor a pickle)",
            hint="expected a state_dict / checkpoint (.pt, .pth), TorchScript or .pt2 file",
        )
    return kind


def _zip_kind(names: list[str]) -> Literal["torchscript", "export", "torch"]:
    # torch zips put every entry under one top folder: "<stem>/...".
    inner = {name.split("/", 1)[1] if "/" in name else name for name in names}
    if "constants.pkl" in inner and any(n.startswith("code/") for n in inner):
        return "torchscript"
    if (
        "archive_format" in inner
        or "models/model.json" in inner
        or any(n.endswith("serialized_exported_program.json") for n in inner)
    ):
        return "export"
    return "torch"


def _load_torchscript(file: Path, arch: str | None, map_location: str) -> LoadedModel:
    import torch

    try:
        module = torch.jit.load(str(file), map_location=map_location)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise ModelLoadError(f"cannot load TorchScript archive {file}: {_first_line(exc)}") from exc
    name = str(getattr(module, "original_name", "") or file.stem)
    return LoadedModel(module, "torchscript", name, f"torchscript {file}", _ignored_arch(arch))


def _load_exported(file: Path, arch: str | None, *, trust_pickle: bool = False) -> LoadedModel:
    import torch

    from layerprof.load.archive import check_export_archive

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
        raise ModelLoadError(
            f"cannot load torch.export program {file}: {_first_line(exc)}"
        ) from exc
    _allow_mode_calls(module)
    notes = (
        *_ignored_arch(arch),
        "exported program: its train/eval behaviour was fixed at export time",
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


def _ignored_arch(arch: str | None) -> tuple[str, ...]:
    return (f"--arch {arch} ignored: the file holds the whole model",) if arch else ()


# ------------------------------------------------------------ torch.save files


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
    from layerprof.load.pickles import refused_globals, scan_torch_file

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
    return _first_line(exc)


def _unreadable(file: Path, exc: Exception) -> ModelLoadError:
    if isinstance(exc, (EOFError, pickle.UnpicklingError)):
        reason = "damaged pickle stream (truncated?)"
    else:
        reason = _first_line(exc)
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
    _ensure_cwd_on_path()
    try:
        return torch.load(file, map_location=map_location, weights_only=False)
    except (ImportError, AttributeError) as exc:
        raise ModelLoadError(
            f"{file} refers to code that cannot be imported: {_first_line(exc)}",
            hint="run from the directory that holds the model's module, or set PYTHONPATH",
        ) from exc
    except Exception as exc:
        raise ModelLoadError(f"cannot unpickle {file}: {_first_line(exc)}") from exc


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
    state, where = _find_state_dict(obj, file)
    if arch is None:
        raise ModelLoadError(
            f"{file} holds a state_dict{where} ({len(state)} tensors), not a model: "
            "--arch is needed to build the model it belongs to",
            hint=_ARCH_EXAMPLE,
        )
    model = build_arch(arch, arch_kwargs)
    notes = _load_weights(model, state, file=file, arch=arch, strict=strict)
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


def _module_kind(module: Any) -> ModelKind:
    import torch

    return "torchscript" if isinstance(module, torch.jit.ScriptModule) else "eager"


def _find_state_dict(obj: Any, file: Path) -> tuple[dict[str, torch.Tensor], str]:
    """The weights in ``obj`` and where they were (``"['state_dict']"`` or ``""``)."""
    if not isinstance(obj, Mapping):
        raise ModelLoadError(
            f"{file} holds {_type_name(obj)}, not a model, state_dict or checkpoint dict"
        )
    for key in CHECKPOINT_KEYS:
        inner = obj.get(key)
        if isinstance(inner, Mapping) and inner:
            return _checked_state_dict(inner, file, f"[{key!r}]"), f"[{key!r}]"
    return _checked_state_dict(obj, file, ""), ""


def _checked_state_dict(obj: Mapping[Any, Any], file: Path, where: str) -> dict[str, torch.Tensor]:
    import torch

    if not obj:
        raise ModelLoadError(f"{file}{where} is an empty dict: no weights to load")
    for key, value in obj.items():
        if not isinstance(key, str):
            raise ModelLoadError(f"{file}{where} is not a state_dict: key {key!r} is not a string")
        # get_extra_state() may store anything under "<module>._extra_state".
        if not isinstance(value, torch.Tensor) and not key.endswith("_extra_state"):
            raise ModelLoadError(
                f"{file}{where} is not a state_dict: {key!r} is {_type_name(value)}, not a tensor",
                hint="expected parameter names -> tensors, or a checkpoint with them under "
                + ", ".join(repr(k) for k in CHECKPOINT_KEYS),
            )
    return dict(obj)


# ------------------------------------------------------------- key matching


def _load_weights(
    model: nn.Module,
    state: dict[str, torch.Tensor],
    *,
    file: Path,
    arch: str,
    strict: bool,
) -> tuple[str, ...]:
    expected = model.state_dict()
    state, notes = _strip_prefixes(state, expected)
    match = _KeyMatch.compare(state, expected)
    if match.clean:
        model.load_state_dict(state, strict=True)
        return notes
    if strict:
        raise ModelLoadError(
            f"state_dict {file} does not match --arch {arch}: {match.describe()}",
            hint="pass --non-strict to load the tensors that match and keep the rest "
            "as initialised",
        )
    loadable = {k: v for k, v in state.items() if k in match.loadable}
    model.load_state_dict(loadable, strict=False)
    return (
        *notes,
        f"non-strict: loaded {len(loadable)} of {len(expected)} tensors; {match.counts()}",
    )


def _strip_prefixes(
    state: dict[str, torch.Tensor], expected: Mapping[str, Any]
) -> tuple[dict[str, torch.Tensor], tuple[str, ...]]:
    """Undo the key prefixes DataParallel/DDP (``module.``) and torch.compile add."""
    notes: list[str] = []
    wanted = set(expected)
    while _all_prefixed(state, "module.") and not _all_prefixed(wanted, "module."):
        state = {k.removeprefix("module."): v for k, v in state.items()}
        notes.append("stripped 'module.' key prefix (DataParallel/DDP)")
    if not any("_orig_mod" in k.split(".") for k in wanted) and any(
        "_orig_mod" in k.split(".") for k in state
    ):
        # torch.compile wraps a module as OptimizedModule(_orig_mod=module), at any depth.
        state = {_drop_segment(k, "_orig_mod"): v for k, v in state.items()}
        notes.append("stripped '_orig_mod.' key segments (torch.compile)")
    return state, tuple(notes)


def _all_prefixed(keys: Mapping[str, Any] | set[str], prefix: str) -> bool:
    return bool(keys) and all(k.startswith(prefix) for k in keys)


def _drop_segment(key: str, segment: str) -> str:
    return ".".join(part for part in key.split(".") if part != segment)


@dataclass(frozen=True)
class _KeyMatch:
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    mismatched: tuple[str, ...]  # "name: file [a, b] vs model [c, d]"
    loadable: frozenset[str]

    @classmethod
    def compare(cls, state: Mapping[str, Any], expected: Mapping[str, Any]) -> _KeyMatch:
        missing = tuple(k for k in expected if k not in state)
        unexpected = tuple(k for k in state if k not in expected)
        mismatched: list[str] = []
        loadable: set[str] = set()
        for key in state.keys() & expected.keys():
            have, want = _shape(state[key]), _shape(expected[key])
            if have == want:
                loadable.add(key)
            else:
                mismatched.append(f"{key}: file {have} vs model {want}")
        return cls(missing, unexpected, tuple(sorted(mismatched)), frozenset(loadable))

    @property
    def clean(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def counts(self) -> str:
        return (
            f"{len(self.missing)} missing, {len(self.unexpected)} unexpected, "
            f"{len(self.mismatched)} size mismatch(es) skipped"
        )

    def describe(self) -> str:
        parts = [
            _listing("missing key", self.missing),
            _listing("unexpected key", self.unexpected),
            _listing("size mismatch", self.mismatched, plural="size mismatches"),
        ]
        return "; ".join(p for p in parts if p)


def _listing(what: str, items: tuple[str, ...], *, plural: str | None = None) -> str:
    if not items:
        return ""
    label = what if len(items) == 1 else (plural or f"{what}s")
    shown = ", ".join(items[:_SHOWN_KEYS])
    more = f", ... ({len(items) - _SHOWN_KEYS} more)" if len(items) > _SHOWN_KEYS else ""
    return f"{len(items)} {label} ({shown}{more})"


def _shape(value: Any) -> list[int] | None:
    shape = getattr(value, "shape", None)
    return list(shape) if shape is not None else None


# ------------------------------------------------------------------- wording


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _raised(exc: BaseException) -> str:
    """``ValueError: bad depth``, ``SystemExit: 3``, ``SystemExit`` (no message)."""
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text.splitlines()[0]}" if text else name


def _type_name(obj: Any) -> str:
    if obj is None:
        return "None"
    name = type(obj).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name}"


def _kwargs_text(kwargs: Mapping[str, Any] | None) -> str:
    if not kwargs:
        return ""
    return "(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"
