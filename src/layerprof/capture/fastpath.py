"""Which code the clean pass runs, watched without changing it; compared with the
per-layer pass afterwards (see :mod:`layerprof.pivot.sections.passes`).

Why: ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` take a fused
fast path in inference (one ``aten::_native_multi_head_attention`` /
``aten::_transformer_encoder_layer_fwd`` kernel instead of their submodules),
and ``TransformerEncoderLayer`` refuses it as soon as a forward hook sits on it
(torch checks ``module._forward_hooks``). So the hooked pass can time other
code than the clean pass whose latency it is compared with, and submodules
such as ``out_proj`` show 0 calls.

How: one forward with *process-wide* module hooks
(``register_module_forward_pre_hook``, which the fast-path checks do not look
at) to know the innermost module and which modules ran, and a
``TorchDispatchMode`` that notes the fused operators (the checks only look for
``__torch_function__`` overrides). Both are verified not to change the path in
tests/analysis/test_passes.py. The probe runs only for models holding a module type
with a known fast path, and never into compiled or scripted submodules.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from layerprof.capture.modules import hookable_modules, is_compiled, is_script, visible_modules
from layerprof.pivot.notes import Note
from layerprof.pivot.sections.passes import FusedLayer, PassCheck

if TYPE_CHECKING:
    import torch

    from layerprof.pivot.profile import Profile

#: Fused fast-path kernels of torch.nn modules (aten overload packet names), each
#: replacing its module's submodules. (TransformerEncoder's padded path only turns
#: its input into a nested tensor; its layers' kernels are the ones noted.)
_FUSED_OPS = frozenset(
    {"aten::_native_multi_head_attention", "aten::_transformer_encoder_layer_fwd"}
)
#: Module types whose forward has a fast path (matched by class name along the MRO,
#: so subclasses count too).
_FAST_PATH_TYPES = frozenset(
    {"MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder"}
)


@dataclass
class _CleanPath:
    """What one watched clean forward did: modules called (path -> calls) and fused
    ops run inside each innermost module (path -> op -> calls); ``error`` says why
    the watch failed (the check is then skipped, never the run)."""

    called: dict[str, int] = field(default_factory=dict)
    fused: dict[str, dict[str, int]] = field(default_factory=dict)
    error: str | None = None


def _has_fast_path(model: torch.nn.Module) -> bool:
    """Whether a module type with a known fast path is in the model (and no opaque one)."""
    found = False
    for _, module in visible_modules(model):
        if is_compiled(module) or is_script(module):
            return False  # dynamo would trace the probe's hooks and dispatch mode
        names = {cls.__name__ for cls in type(module).__mro__}
        found = found or bool(names & _FAST_PATH_TYPES)
    return found


def watch_clean_path(model: torch.nn.Module, forward: Callable[[], Any]) -> _CleanPath | None:
    """One forward under the watch (None when the model has no fast-path module)."""
    if not _has_fast_path(model):
        return None
    seen = _CleanPath()
    paths = {id(m): p for p, m in hookable_modules(model)}
    stack: list[str] = []
    try:
        with _module_hooks(paths, stack, seen.called), _FusedOps(stack, seen.fused):
            forward()
    except Exception as exc:  # the model ran clean before: this is the watch's failure
        return _CleanPath(error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
    return seen


@contextlib.contextmanager
def _module_hooks(
    paths: dict[int, str], stack: list[str], called: dict[str, int]
) -> Iterator[None]:
    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )

    def pre(module: Any, args: Any) -> None:
        path = paths.get(id(module))
        if path is not None:
            stack.append(path)
            called[path] = called.get(path, 0) + 1

    def post(module: Any, args: Any, out: Any) -> None:
        path = paths.get(id(module))
        if path is not None and stack and stack[-1] == path:
            stack.pop()

    handles = [register_module_forward_pre_hook(pre)]
    try:
        handles.append(register_module_forward_hook(post, always_call=True))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*global hooks on modules")
            yield
    finally:
        for h in handles:
            h.remove()


class _FusedOps:
    """A dispatch mode noting fused fast-path ops under the innermost module."""

    def __init__(self, stack: list[str], fused: dict[str, dict[str, int]]) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        base: Any = TorchDispatchMode  # untyped in torch

        def note(func: Any) -> None:
            name = _op_name(func)
            if name in _FUSED_OPS and stack:
                ops = fused.setdefault(stack[-1], {})
                ops[name] = ops.get(name, 0) + 1

        class Mode(base):  # type: ignore[misc]
            def __torch_dispatch__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                note(func)
                return func(*args, **(kwargs or {}))

        self.mode: Any = Mode()

    def __enter__(self) -> _FusedOps:
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)


def _op_name(func: Any) -> str:
    """``aten::_native_multi_head_attention`` for the op overload ``aten._native_...default``."""
    packet = getattr(func, "_overloadpacket", None)
    name = getattr(packet, "__name__", None) or str(func).split(".")[-2]
    namespace = getattr(func, "namespace", "aten")
    return f"{namespace}::{name}"


def check_passes(profile: Profile, clean: _CleanPath | None) -> Profile:
    """The profile with its ``passes`` section: the clean path against the per-layer rows."""
    if clean is None:
        return profile
    if clean.error is not None:
        text = f"code paths of the two passes not compared: {clean.error}"
        return profile.with_notes(Note("passes-not-compared", text, {"error": clean.error}))
    return replace(profile, passes=compare(clean, profile))


def compare(clean: _CleanPath, profile: Profile) -> PassCheck:
    """Fused layers (did the per-layer pass fuse them too?) and modules called in one pass only."""
    layered = {p: s.calls for p, s in profile.samples.items() if s.calls > 0}
    types = {i.path: i.type for i in profile.layers}
    fused = []
    for path, ops in sorted(clean.fused.items()):
        skipped = tuple(p for p in types if p.startswith(path + ".") and p not in clean.called)
        # The per-layer pass fused too when the submodules it skipped stayed uncalled.
        same = not any(p in layered for p in skipped)
        for op, calls in sorted(ops.items()):  # calls of one watched forward
            fused.append(FusedLayer(path, types.get(path, "?"), op, calls, skipped, same))
    explained = {p for f in fused for p in f.skipped}
    clean_only = tuple(p for p in clean.called if p not in layered and p in types)
    layer_only = tuple(
        p for p in layered if p not in clean.called and p in types and p not in explained
    )
    return PassCheck(fused=tuple(fused), clean_only=clean_only, layer_only=layer_only)
