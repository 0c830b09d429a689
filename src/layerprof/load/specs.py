"""``--arch`` / ``--loss`` specs (``module:callable`` or ``path/file.py:callable``) -> a callable, and the model it builds.

The user's code is imported here, so every failure names the spec and says what the
user can do (the callables the module has, the package that is missing).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof.errors import ModelLoadError
from layerprof.load.messages import raised, type_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import nn


ARCH_EXAMPLE = "e.g. --arch mypkg.nets:ResNetish --arch-kwargs '{\"depth\": 18}'"


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
            f"--arch {spec}: calling it{_kwargs_text(kwargs)} raised {raised(exc)}",
            hint="check --arch-kwargs against the constructor's parameters",
        ) from exc
    if not isinstance(model, nn.Module):
        raise ModelLoadError(
            f"--arch {spec} returned {type_name(model)}, not a torch.nn.Module",
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
            f"{option} {spec!r} is not of the form module:callable", hint=ARCH_EXAMPLE
        )
    return module_name, attr


def _import_module(module_name: str, spec: str, option: str = "--arch") -> Any:
    ensure_cwd_on_path()
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
            f"{option} {spec}: importing '{module_name}' raised {raised(exc)}"
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
        raise ModelLoadError(f"--arch {spec}: importing {file} raised {raised(exc)}") from exc
    return module


def ensure_cwd_on_path() -> None:
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


def _kwargs_text(kwargs: Mapping[str, Any] | None) -> str:
    if not kwargs:
        return ""
    return "(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"
