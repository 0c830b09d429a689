"""The activation-memory finding: the layer that saves the most for backward, and what
activation checkpointing it would save (an estimate, stated as one).

Reads ``Profile.activation_memory`` (layerprof.pivot.sections.memory). Checkpointing a layer
(``torch.utils.checkpoint``) keeps only its input during the forward and recomputes the
rest in backward, so the estimate is the layer's saved bytes (its total) minus its
input's. The candidate is the called layer, below the root, with the most saved bytes,
among those holding less than ``_WHOLE_MODEL_SHARE`` of the model's: a wrapper around the
whole model would "save" everything by recomputing the whole forward, which is no lead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprof.analysis.finding import Finding
from layerprof.units import human_bytes

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile
    from layerprof.pivot.sections.memory import ActivationMemory, MemoryTotals

#: A layer holding at least this share of the model's saved bytes is (nearly) the model.
_WHOLE_MODEL_SHARE = 0.9
#: Checkpointing must save at least this share of the step's saved bytes ...
_MIN_SAVING_SHARE = 0.10
#: ... and at least this many bytes to be worth a finding.
_MIN_SAVING_BYTES = 1 << 20


def has_activation_memory(profile: Profile) -> bool:
    return profile.activation_memory is not None


def memory_findings(profile: Profile) -> list[Finding]:
    section = profile.activation_memory
    if section is None:
        return []
    pick = checkpoint_candidate(section)
    if pick is None:
        return []
    layer, saving = pick
    whole = section.saved_bytes
    if saving < _MIN_SAVING_BYTES or saving < _MIN_SAVING_SHARE * whole:
        return []
    row = next(r for r in section.rows if r.path == layer.path)
    kept = row.input_bytes or 0
    share = 100 * layer.activations / whole if whole else 0.0
    extra = []
    if layer.grads is not None:
        extra.append(f"gradients {human_bytes(layer.grads)}")
    if layer.optimizer is not None:
        extra.append(f"optimizer state {human_bytes(layer.optimizer)}")
    more = f"; parameters {human_bytes(layer.params)}" + "".join(f", {e}" for e in extra)
    return [
        Finding(
            "info",
            f"{layer.path} holds {share:.0f}% of the activation memory"
            f" ({human_bytes(layer.activations)} saved for backward)",
            f"{layer.path}'s forward saves {human_bytes(layer.activations)} for backward"
            f" (itself {human_bytes(layer.activations_self)}, its children the rest) of"
            f" {human_bytes(whole)} in the whole step{more}. Checkpointing it would keep"
            f" only its input ({human_bytes(kept)}) until backward and recompute the rest:"
            f" an estimated {human_bytes(saving)} less activation memory, for one more"
            f" forward of {layer.path} during backward.",
            "wrap its call in torch.utils.checkpoint.checkpoint(..., use_reentrant=False)"
            " (an estimate: its saved bytes minus its input's; what other layers save of"
            " its output stays)",
            layer=layer.path,
        )
    ]


def checkpoint_candidate(section: ActivationMemory) -> tuple[MemoryTotals, int] | None:
    """The layer whose checkpointing would save the most, and the estimated bytes."""
    called = {r.path: r.input_bytes for r in section.rows if r.input_bytes is not None}
    totals = section.totals()
    roots = [t for t in totals if t.parent is None]
    whole = sum(t.activations for t in roots)
    best: tuple[MemoryTotals, int] | None = None
    for t in totals:
        if t.parent is None or t.path not in called or t.activations <= 0:
            continue
        if whole and t.activations >= _WHOLE_MODEL_SHARE * whole:
            continue
        saving = max(t.activations - (called[t.path] or 0), 0)
        if best is None or t.activations > best[0].activations:
            best = (t, saving)
    return best
