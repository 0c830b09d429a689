"""What a Recorder's profile says about the model it recorded: the modules it could not
time one by one (compiled), the forwards it did not see (a compiled caller), and the
modules set on the model after it opened."""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprof.capture.modules import is_compiled, wrappable_modules
from layerprof.pivot.notes import Note

if TYPE_CHECKING:
    import torch


def compiled_note(model: torch.nn.Module) -> tuple[Note, ...]:
    """Compiled modules are one row each: hooks cannot time what runs inside a
    compiled region (they would break its graph), so say where their layers went."""
    compiled = [p for p, m in wrappable_modules(model) if is_compiled(m)]
    if not compiled:
        return ()
    shown = ", ".join(p or "(the model)" for p in compiled[:5])
    return (
        Note(
            "compiled-leaves",
            f"compiled modules are timed whole, forward and backward ({shown}): the"
            " layers inside a compiled region run as fused kernels no hook can time;"
            " `layerprof run --compile` (or profile(..., compile=True)) attributes the"
            " compiled kernels to them",
            {"paths": compiled},
        ),
    )


def compiled_caller_note(model: torch.nn.Module, compiled: bool) -> tuple[Note, ...]:
    """The model ran inside a compiled caller (``torch.compile(model)`` called while
    ``model`` is recorded; ``compiled``): Dynamo compiled those forwards without the
    wrappers and hooks (``dynamo_compiling``), so they are not recorded; said, not
    dropped."""
    if not compiled:
        return ()
    name = type(model).__name__
    return (
        Note(
            "compiled-caller",
            f"the recorded model ({name}) also ran inside torch.compile of it: those"
            " forwards (and their backward) ran as compiled code with none of the"
            " Recorder's wrappers or hooks, as compiled without it, and are not in this"
            " profile; to time them, record the compiled module (Recorder(compiled),"
            " timed whole) or use `layerprof run --compile` for its layers",
            {"model": name},
        ),
    )


def compiled_notes(model: torch.nn.Module, compiled: bool) -> tuple[Note, ...]:
    """The notes about compiled code: compiled modules, and a compiled caller."""
    return compiled_note(model) + compiled_caller_note(model, compiled)


def replaced_paths(model: torch.nn.Module, wrapped: dict[str, torch.nn.Module]) -> list[str]:
    """The paths whose module is not the one wrapped there (``wrapped``: path -> module)."""
    if not wrapped:
        return []
    now = dict(wrappable_modules(model))
    return sorted(p for p, m in now.items() if wrapped.get(p) is not m)


def replaced_note(changed: list[str]) -> tuple[Note, ...]:
    """Modules set on the model after the Recorder opened (``model.fc = nn.Linear(...)``
    mid-loop) carry none of its wrappers: their forward and backward time is their
    parent's. Said, by path, rather than dropped silently."""
    if not changed:
        return ()
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return (
        Note(
            "modules-replaced",
            f"modules were replaced or added while recording ({shown}): the Recorder"
            " wraps the modules it found when it opened, so their time (forward and"
            " backward) is counted in their parent's; open the Recorder after changing"
            " the model",
            {"paths": changed},
        ),
    )
