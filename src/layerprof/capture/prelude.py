"""The forwards before an eager mode's timed pass (hooks, ops): shapes, FLOPs, peak memory.

Before any hook changes the code path, one watched forward notes fused fast
paths (``capture.fastpath``); then one forward with shape hooks, one counting
FLOPs, bytes and op time per layer (with ``backward`` also one counted training
step, and one counting the bytes each layer saves for backward,
``capture.memory.activations``) and, on CUDA, one reading the allocator's peaks.
A mode adds the notes and the activation memory to its base Profile with
:meth:`Prelude.onto`, turns the rest into its ``LayerInfo`` rows with
:meth:`Prelude.layers` and checks its pass against the clean one with
:meth:`Prelude.checked`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from layerprof.capture.calls import guarded
from layerprof.capture.fastpath import check_passes, watch_clean_path
from layerprof.capture.flops.counter import count_model, flop_sections
from layerprof.capture.memory.activations import measure_step
from layerprof.capture.memory.allocator import CudaMemory, peak_memory
from layerprof.capture.modules import hookable_modules, visible_modules
from layerprof.capture.platform.clocks import synchronizer
from layerprof.capture.recording.layerinfo import layer_infos
from layerprof.capture.recording.shapestore import ShapeCapture
from layerprof.capture.step import backward_step
from layerprof.pivot.notes import Note

if TYPE_CHECKING:
    import torch

    from layerprof.capture.flops.counter import FlopCount
    from layerprof.capture.layerpass import Pass
    from layerprof.capture.memory.allocator import MemoryCounter
    from layerprof.capture.options import RunOptions
    from layerprof.pivot.profile import Profile
    from layerprof.pivot.records import LayerInfo
    from layerprof.pivot.sections.flops import FlopSummary
    from layerprof.pivot.sections.memory import ActivationMemory


@dataclass(frozen=True)
class _Prelude:
    """Shapes, FLOPs and peaks of one eager model, and the clean pass's code path."""

    clean_path: Any
    shapes: ShapeCapture
    flops: FlopCount | None
    peaks: dict[str, int] | None
    notes: tuple[Note, ...]
    activation_memory: ActivationMemory | None = None

    def onto(self, base: Profile) -> Profile:
        """``base`` with the prelude's notes and activation memory."""
        return replace(base.with_notes(*self.notes), activation_memory=self.activation_memory)

    def layers(
        self, run: Pass, base: Profile, peaks: dict[str, int] | None = None
    ) -> tuple[tuple[LayerInfo, ...], FlopSummary | None]:
        """The per-layer rows with FLOP detail, and the FLOP summary with the device's peak."""

        rows = layer_infos(
            run.model, self.shapes.shapes, flops=self.flops.flops if self.flops else None,
            output_bytes=self.shapes.output_bytes,
            peak_bytes=peaks if peaks is not None else self.peaks,
        )  # fmt: skip
        meta = base.meta
        return flop_sections(
            rows, self.flops, device=meta.device, dtype=meta.dtype, threads=meta.threads or 1,
            given=run.opts.peak,
        )  # fmt: skip

    def checked(self, profile: Profile) -> Profile:
        """The profile with the clean and per-layer passes' code paths compared."""
        return check_passes(profile, self.clean_path)


def prelude(run: Pass) -> _Prelude:
    """The forwards before the timed per-layer pass (module docstring)."""
    model, forward = run.model, run.forward
    clean_path = watch_clean_path(model, forward)  # before any hook changes the path
    with ShapeCapture(model) as shapes:
        guarded(forward, model)
    flops, flop_note = _flops(model, forward, run.args, run.kwargs, run.device, run.opts)
    peaks = _peaks(model, forward, run.device)
    memory, memory_note = _activation_memory(run)
    counted = [n for n in (flop_note, memory_note) if n]
    notes = (*_opaque_notes(model), *counted)
    return _Prelude(clean_path, shapes, flops, peaks, notes, memory)


def memory_counter(device: str) -> MemoryCounter | None:
    """The allocator counters of ``device``; CPU has none (tests replace this)."""
    if not device.startswith("cuda"):
        return None

    return CudaMemory(device)


def _peaks(
    model: torch.nn.Module, forward: Callable[[], Any], device: str
) -> dict[str, int] | None:
    counter = memory_counter(device)
    if counter is None:
        return None

    return peak_memory(model, forward, counter)


def _activation_memory(run: Pass) -> tuple[ActivationMemory | None, Note | None]:
    """With ``backward``: the bytes each layer saves for backward, from one counted step
    (layerprof.capture.memory.activations); a step the counter cannot run says why."""
    if not run.opts.backward:
        return None, None

    try:
        section = measure_step(
            run.model, run.args, run.kwargs, run.opts.loss, counter=memory_counter(run.device)
        )
    except Exception as exc:  # the timed backward pass reports a model's own errors
        first = str(exc).splitlines()[0][:120] if str(exc) else ""
        error = f"{type(exc).__name__}: {first}"
        text = f"activation memory not counted: {error}"
        return None, Note("activation-memory-not-counted", text, {"error": error})
    return section, None


def _flops(
    model: torch.nn.Module,
    forward: Callable[[], Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    device: str,
    opts: RunOptions,
) -> tuple[FlopCount | None, Note | None]:
    """FLOPs per layer from one counted forward (and a counted step with ``backward``);
    a model the counter cannot run keeps its timings and says why FLOPs are missing."""

    step = (
        backward_step(model, args, kwargs, opts.loss, synchronizer(device))
        if opts.backward
        else None
    )
    try:
        # keyed by the user's paths already (the counter walks hookable_modules)
        return count_model(model, forward, device=device, step=step), None
    except Exception as exc:  # the counter's own limits, not a model bug: it ran before
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        return None, Note("flops-not-counted", f"FLOPs not counted: {error}", {"error": error})


def _opaque_notes(model: torch.nn.Module) -> list[Note]:
    """Scripted submodules are timed whole: say why their insides have no rows."""

    hooked = {p for p, _ in hookable_modules(model)}
    return [
        Note(
            "torchscript-submodule",
            f"{path} is a TorchScript submodule: timed as one layer (its submodules run"
            " inside TorchScript, where no Python code can time them)",
            {"path": path},
        )
        for path, _ in visible_modules(model)
        if path not in hooked
    ]
