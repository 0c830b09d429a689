"""Which modules take hooks or forward wrappers, and handles that are removed together.

Every pass that hooks a model (shapes, memory, backward) registers through
``HookHandles.registering()``: if registering fails half way, what was added
is removed, and ``remove()`` takes every hook off again - a model is never
left with hooks on it. The timing passes (the Recorder, ops mode's layer
ranges) swap an instance-level wrapper in for each module's entry point
instead (``ForwardWrapper``), which ``remove()`` restores the same way; see
docs/definitions.md ("What other code sees while recording").
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from layerprof.capture.platform.distributed import user_modules

if TYPE_CHECKING:
    import torch


class HookHandles:
    """Handles of hooks (or forward wrappers) registered together, removed together."""

    def __init__(self) -> None:
        self._items: list[Any] = []

    def add(self, handle: Any) -> None:
        self._items.append(handle)

    def remove(self) -> None:
        # Last in, first out: a wrapper installed over another one comes off first.
        while self._items:
            self._items.pop().remove()

    def __bool__(self) -> bool:
        return bool(self._items)

    @contextlib.contextmanager
    def registering(self) -> Iterator[HookHandles]:
        """Register inside the block; on any error, remove what it added."""
        try:
            yield self
        except BaseException:
            self.remove()
            raise


def visible_modules(
    model: torch.nn.Module, *, compiled_leaves: bool = True
) -> list[tuple[str, torch.nn.Module]]:
    """``named_modules()`` without the insides of scripted and compiled modules.

    A ``torch.jit.script``-ed (or traced) submodule runs its own submodules
    inside TorchScript, where nothing Python fires: it is one leaf layer, not a
    tree. A ``torch.compile``-d module (``torch.compile(m)`` or ``m.compile()``),
    the root included, is one leaf too, timed around the compiled call: hooks or
    wrappers inside it would be traced by dynamo, break its graph and trigger
    recompiles, i.e. change what is measured. ``compiled_leaves=False`` keeps the
    insides of compiled modules: ``--compile`` compiles regions itself and attributes
    their kernels to the modules inside (layerprof.capture.compiled.run).
    """

    out: list[tuple[str, torch.nn.Module]] = []
    opaque: list[str] = []
    for path, module in user_modules(model):  # DDP/FSDP wrappers left out of the paths
        if any(_inside(path, o) for o in opaque):
            continue
        if (path and is_script(module)) or (compiled_leaves and is_compiled(module)):
            opaque.append(path)
        out.append((path, module))
    return out


def _inside(path: str, outer: str) -> bool:
    return path != outer and (outer == "" or path.startswith(outer + "."))


def hookable_modules(
    model: torch.nn.Module, *, compiled_leaves: bool = True
) -> list[tuple[str, torch.nn.Module]]:
    """The visible modules that take forward hooks (not scripted ones)."""
    if is_script(model):
        return []  # a whole scripted model: runner.py's TorchScript path handles it
    visible = visible_modules(model, compiled_leaves=compiled_leaves)
    return [(p, m) for p, m in visible if not is_script(m)]


def wrappable_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The visible modules a forward wrapper times: scripted and compiled ones too,
    as leaves (the wrapper runs outside TorchScript and outside dynamo)."""
    if is_script(model):
        return []  # a whole scripted model: runner.py's TorchScript path handles it
    return visible_modules(model)


def is_opaque(module: Any) -> bool:
    """Whether a module is timed as one leaf (scripted or compiled)."""
    return is_script(module) or is_compiled(module)


def is_compiled(module: Any) -> bool:
    """``torch.compile(module)`` or ``module.compile()``."""
    if type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod"):
        return True
    return compiled_in_place(module)


class ForwardWrapper:
    """An instance-level wrapper swapped in for one module's entry point, and restored.

    The entry point is the instance attribute ``nn.Module.__call__`` reaches
    last: ``forward`` (what ``_call_impl`` calls after the module's hooks), or
    ``_compiled_call_impl`` for a module compiled in place (``m.compile()``),
    whose hooks and ``forward`` run inside the compiled code. Like HF
    accelerate's ``add_hook_to_module``, the wrapper carries ``__wrapped__``,
    so ``inspect.signature(module.forward)`` is unchanged. ``remove()`` puts
    back exactly what was there: the class's method (the instance attribute
    deleted) or an instance attribute another tool had set.

    ``make(inner)`` builds the wrapper around ``inner`` (the current entry
    point) and may give it a ``disable()`` attribute: when another wrapper was
    put on top of ours and is still there at ``remove()``, ours cannot come off
    without breaking theirs, so it is disabled (a pass-through from then on)
    and skipped when a layerprof wrapper above restores what it replaced.
    """

    __slots__ = ("_module", "_name", "_overlay", "_previous", "wrapper")
    MISSING: Any = object()

    def __init__(self, module: Any, make: Callable[[Any], Any]) -> None:
        self._module = module
        self._name = _entry_point(module)
        self._previous = module.__dict__.get(self._name, self.MISSING)
        self._overlay: Any = None
        inner = getattr(module, self._name)
        wrapper = _wraps(make(inner), inner)
        wrapper.__layerprof_previous__ = self._previous
        wrapper.__layerprof_removed__ = False
        object.__setattr__(module, self._name, wrapper)
        self.wrapper = wrapper

    @property
    def module(self) -> Any:
        """The module this wrapper sits on."""
        return self._module

    def overlay(self, fn: Callable[..., Any]) -> None:
        """Put ``fn`` (which calls ``self.wrapper``) in front of our wrapper until
        ``clear_overlay``; nothing when another wrapper sits on top of ours."""
        if self._module.__dict__.get(self._name) is self.wrapper:
            self._overlay = _wraps(fn, self.wrapper)
            object.__setattr__(self._module, self._name, self._overlay)

    def clear_overlay(self) -> None:
        if self._overlay is not None and self._module.__dict__.get(self._name) is self._overlay:
            object.__setattr__(self._module, self._name, self.wrapper)
        self._overlay = None

    def remove(self) -> None:
        self.clear_overlay()
        module, name, wrapper = self._module, self._name, self.wrapper
        if module.__dict__.get(name, self.MISSING) is wrapper:
            previous = self._previous
            while getattr(previous, "__layerprof_removed__", False):
                previous = previous.__layerprof_previous__
            if previous is self.MISSING:
                object.__delattr__(module, name)
            else:
                object.__setattr__(module, name, previous)
            return
        wrapper.__layerprof_removed__ = True
        disable = getattr(wrapper, "disable", None)
        if disable is not None:
            disable()


def _wraps(wrapper: Any, inner: Any) -> Any:
    """``functools.update_wrapper`` without merging ``inner.__dict__`` (a layerprof
    wrapper's own attributes must not pass to the one around it)."""
    return functools.update_wrapper(wrapper, inner, updated=())


def compiled_in_place(module: Any) -> bool:
    """``module.compile()`` was called: its ``__call__`` runs a compiled ``_call_impl``,
    inside which dynamo traces the module's own hooks."""
    return getattr(module, "_compiled_call_impl", None) is not None


def _entry_point(module: Any) -> str:
    """The attribute a forward wrapper replaces (see ForwardWrapper)."""
    if compiled_in_place(module):
        return "_compiled_call_impl"
    return "forward"


def is_script(module: Any) -> bool:
    import torch

    return isinstance(module, torch.jit.ScriptModule)
