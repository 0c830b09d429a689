"""Which parts of a model layerprof compiles, and the eager markers around them.

A model can come already compiled: ``torch.compile(model)`` (an
``OptimizedModule``), or regionally (``block.compile()``, or a submodule
replaced by ``torch.compile(block)``). layerprof compiles it again with its
own backend: the recording backend and the provenance / kernel-profile flags
are part of how inductor compiles (and of its cache key), so code compiled
without them cannot be attributed. The user's regions are kept: each becomes
a region layerprof compiles; a plain model is compiled whole (region ``""``).
Everything is restored afterwards.

A region's call is wrapped in a ``layer:<path>`` range, and every module gets
hooks that open such a range too - but only where the module runs eagerly:
inside a compiled region Dynamo traces the hooks, sees
``torch.compiler.is_compiling()`` and leaves them out of the graph, so the
compiled program is the one a run without hooks compiles (same cache key).
The hooks go on before the model compiles (Dynamo guards on hook dicts, see
:class:`EagerRanges`) and open ranges only while the per-layer pass records.
The hooks' code is marked for Dynamo to skip as a frame of its own, so a hook
called from eager code runs as plain Python. The innermost eager range around
a compiled graph's call names the module its frame's ``self`` is: that is the
prefix of the graph's module paths (a graph break makes Dynamo compile a
block's ``forward`` on its own, once for every block).
"""

from __future__ import annotations

import contextlib
import functools
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from layerprof.capture.modules import hookable_modules
from layerprof.capture.profiling.profiler import range_api
from layerprof.traceformat import LAYER_RANGE

if TYPE_CHECKING:
    import torch


def _is_optimized(module: Any) -> bool:
    return type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod")


@dataclass
class Unwrapped:
    """The eager model under what the user compiled, and how to put it back."""

    model: Any
    user_regions: tuple[str, ...]
    undo: list[Callable[[], None]] = field(default_factory=list)

    @property
    def recompiled(self) -> bool:
        return bool(self.user_regions)

    def regions(self) -> tuple[str, ...]:
        """The paths to compile: the user's outermost regions, or the whole model."""
        outer = [
            r for r in self.user_regions
            if not any(o != r and (o == "" or r.startswith(o + ".")) for o in self.user_regions)
        ]  # fmt: skip
        return tuple(outer) or ("",)

    def restore(self) -> None:
        while self.undo:
            self.undo.pop()()


def unwrap(model: Any) -> Unwrapped:
    """Take off every ``torch.compile`` the user put on ``model`` (restored by ``restore``)."""
    regions: list[str] = []
    if _is_optimized(model):
        model = model._orig_mod
        regions.append("")
    out = Unwrapped(model=model, user_regions=())
    try:
        _unwrap_children(model, "", regions, out.undo)
    except BaseException:
        out.restore()
        raise
    out.user_regions = tuple(dict.fromkeys(regions))
    return out


def _unwrap_children(
    module: Any, path: str, regions: list[str], undo: list[Callable[[], None]]
) -> None:
    if getattr(module, "_compiled_call_impl", None) is not None:
        regions.append(path)
        saved = module._compiled_call_impl
        module._compiled_call_impl = None
        undo.append(functools.partial(setattr, module, "_compiled_call_impl", saved))
    for name, child in list(module._modules.items()):
        if child is None:
            continue
        child_path = f"{path}.{name}" if path else name
        if _is_optimized(child):
            regions.append(child_path)
            module._modules[name] = child._orig_mod
            undo.append(functools.partial(module._modules.__setitem__, name, child))
            child = child._orig_mod
        _unwrap_children(child, child_path, regions, undo)


def compile_regions(
    model: torch.nn.Module,
    regions: tuple[str, ...],
    backend: Any,
    *,
    dynamic: bool | None,
    undo: list[Callable[[], None]],
) -> None:
    """Give every region a compiled call, wrapped in its range.

    Each region compiles as ``torch.compile(module)`` compiles a module whose
    ``forward`` is torch's own (a ``Sequential``): from an extra frame that
    calls it (:func:`_region`), so that Dynamo traces the whole call, whatever
    module it is.
    """
    import torch

    for path in regions:
        module = model.get_submodule(path) if path else model
        compiled = torch.compile(_region_of(module, path), backend=backend, dynamic=dynamic)
        saved = module._compiled_call_impl
        module._compiled_call_impl = _ranged(
            functools.partial(compiled, module), LAYER_RANGE + path
        )
        undo.append(functools.partial(setattr, module, "_compiled_call_impl", saved))


def eager_range_api() -> tuple[Callable[[str], Any], Callable[[Any], None]]:
    """``range_api``'s enter/leave, which Dynamo leaves alone when eager code calls them
    (it would otherwise look at them as frames to compile, and count them)."""
    enter, leave = range_api()
    _skip_frame(enter)
    _skip_frame(leave)
    return enter, leave


def _region_of(module: Any, path: str) -> Callable[..., Any]:
    """:func:`_region` with a code object of its own per module and path.

    Dynamo keeps its compiled code per code object, and a code object may be
    compiled a limited number of times (``recompile_limit``). One shared by every
    model layerprof compiles in a process would soon run eagerly, and would count
    each new model's first compile as a recompile of the last one's (a notebook
    profiling two models, a test suite). The codes live as long as their module;
    the same module profiled again finds its compiled code. Named after the
    module, for the frame's name.
    """
    try:
        codes = _REGION_CODE.setdefault(module, {})
    except TypeError:  # a module that is not hashable or weakly referenceable
        codes = _SHARED_CODE.setdefault(type(module), {})
    code = codes.get(path)
    if code is None:
        name = f"{type(module).__name__}.__call__"
        code = _region.__code__.replace(co_name=name)
        if hasattr(code, "co_qualname"):
            code = code.replace(co_qualname=name)  # type: ignore[call-arg,unused-ignore]  # 3.11+
        codes[path] = code
    return types.FunctionType(code, _region.__globals__, code.co_name)


_REGION_CODE: weakref.WeakKeyDictionary[Any, dict[str, types.CodeType]] = (
    weakref.WeakKeyDictionary()
)
_SHARED_CODE: dict[type, dict[str, types.CodeType]] = {}


def _region(module: Any, *args: Any, **kwargs: Any) -> Any:
    """The frame a region compiles: layerprof's own, calling the module's hooks and forward.

    ``_call_impl`` lives in torch, whose frames Dynamo does not compile: compiling
    it directly would compile only the user-code frames under a torch module
    (a ``Sequential``). The module comes in as an argument, so the graph's module
    stacks start from this frame's local ``module``.
    """
    return module._call_impl(*args, **kwargs)


def _ranged(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    enter, leave = eager_range_api()

    def call(*args: Any, **kwargs: Any) -> Any:
        handle = enter(name)
        try:
            return fn(*args, **kwargs)
        finally:
            leave(handle)

    _skip_frame(call)
    return call


def _skip_frame(fn: Callable[..., Any]) -> None:
    """Dynamo never compiles ``fn`` as a frame of its own (it still inlines it when tracing)."""
    from torch._dynamo.eval_frame import skip_code

    skip_code(fn.__code__)


class EagerRanges:
    """``layer:<path>`` ranges around every module call that runs outside compiled code.

    Dynamo guards on what it traced of a module's hooks: torch 2.14 guards
    ``not module._forward_hooks`` when it compiled a module without hooks, and
    with hooks on, the hook dicts' keys and the hook functions. So the hooks
    go on *before* the model compiles and stay until the run ends (hooks added
    between the compile and the timed passes recompiled every region inside
    the profiled forwards), and every module gets the same two functions under
    the same key (:data:`HOOK_KEY`), not a handle id of its own: a frame that
    Dynamo compiled once for several modules (a block's ``forward`` after a
    graph break) or in an earlier run (the same model profiled again) passes
    its guards for all of them. The functions look the module up in the
    recording instance; outside :meth:`recording` they return at once.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._names: dict[int, str] = {}
        self._opened: dict[int, list[Any]] = {}
        self._hooked: list[Any] = []
        self._enter, self._leave = eager_range_api()

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """The ranges open and close only inside this block."""
        _RECORDING[0] = self
        try:
            yield
        finally:
            _RECORDING[0] = None

    def __enter__(self) -> EagerRanges:
        _shared_hooks()
        try:
            for path, module in hookable_modules(self.model, compiled_leaves=False):
                if HOOK_KEY in module._forward_pre_hooks or _torch_forward(module):
                    continue  # another run's ranges are on it (a nested profile)
                self._names[id(module)] = LAYER_RANGE + path
                self._opened[id(module)] = []
                module._forward_pre_hooks[HOOK_KEY] = _pre_hook
                module._forward_hooks[HOOK_KEY] = _post_hook
                module._forward_hooks_always_called[HOOK_KEY] = True
                self._hooked.append(module)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        while self._hooked:
            module = self._hooked.pop()
            module._forward_pre_hooks.pop(HOOK_KEY, None)
            module._forward_hooks.pop(HOOK_KEY, None)
            module._forward_hooks_always_called.pop(HOOK_KEY, None)


def _torch_forward(module: Any) -> bool:
    """Whether the module's ``forward`` is torch's own (``nn.Linear``, ``nn.Sequential``).

    Such modules get no range hooks: a hook on one makes Dynamo compile its
    ``forward`` as a frame of its own where eager code calls it after a graph
    break (torch 2.13: ``head`` of a model whose loop breaks), which a run
    without hooks leaves eager. A prefix is only needed for frames Dynamo
    compiles, and it compiles the user's code (and the regions, which have
    ranges of their own)."""
    forward = getattr(type(module), "forward", None)
    return str(getattr(forward, "__module__", "")).startswith("torch.")


#: The key of layerprof's range hooks in every module's hook dicts: one key for all
#: (handle ids are unique per registration, and Dynamo guards on the keys). Negative:
#: ``RemovableHandle`` ids count up from 0.
HOOK_KEY = -0x4C50
_RECORDING: list[EagerRanges | None] = [None]


def _pre_hook(module: Any, args: Any) -> None:
    # ``is_compiling()`` comes first: traced into a graph, the hook returns before it
    # reads anything, so it leaves no op in the graph
    if _IS_COMPILING[0]():
        return
    # No calls but the (skipped) range functions: any other Python function called
    # from here, in eager code under a compiled caller, would be a frame Dynamo compiles.
    ranges = _RECORDING[0]
    if ranges is not None and id(module) in ranges._names:
        ranges._opened[id(module)].append(ranges._enter(ranges._names[id(module)]))


def _post_hook(module: Any, args: Any, out: Any) -> None:
    if _IS_COMPILING[0]():
        return
    ranges = _RECORDING[0]
    opened = ranges._opened.get(id(module)) if ranges is not None else None
    if ranges is not None and opened:
        ranges._leave(opened.pop())


_IS_COMPILING: list[Callable[[], bool]] = []


@functools.cache
def _shared_hooks() -> None:
    """Dynamo runs the hooks as plain Python when eager code calls them (once per process)."""
    import torch

    _IS_COMPILING.append(torch.compiler.is_compiling)
    _skip_frame(_pre_hook)
    _skip_frame(_post_hook)
