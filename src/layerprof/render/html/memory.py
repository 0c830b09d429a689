"""The report's activation-memory section: per layer, the bytes its forward saves for
backward (total and self), its parameters, gradients and optimizer state, and the
allocator's peak per phase of the step (CUDA) - the TensorBoard plugin's memory view,
per layer. Reads ``Profile.activation_memory`` (layerprof.pivot.sections.memory)."""

from __future__ import annotations

from layerprof.pivot.sections.memory import ActivationMemory, MemoryTotals
from layerprof.render.html.charts import BarSeries, Chart, bars
from layerprof.render.html.page import (
    Col,
    Section,
    bytes_col,
    chart_slot,
    name_col,
    stat_cards,
    table,
)
from layerprof.render.html.subject import Subject
from layerprof.units import human_bytes

#: Bars in the chart: the layers saving the most themselves.
_CHART_LAYERS = 20
_MIB = float(1 << 20)


def activation_memory_section(s: Subject) -> Section | None:
    p = s.profile
    if p is None or p.activation_memory is None:
        return None
    section = p.activation_memory
    totals = section.totals()
    root = p.meta.model or "model"
    cols: list[Col[MemoryTotals]] = [
        name_col("Layer", lambda t: t.path or root),
        bytes_col("Activations", lambda t: t.activations),
        bytes_col("Self", lambda t: t.activations_self),
        bytes_col("Parameters", lambda t: t.params),
    ]
    if section.has_grads:
        cols.append(bytes_col("Gradients", lambda t: t.grads))
    if section.has_optimizer:
        cols.append(bytes_col("Optimizer state", lambda t: t.optimizer))
    body = stat_cards(_cards(section)) + _chart_html(totals)
    body += table("lp-activation-memory", cols, totals, filter_label="filter layers")
    return Section("activation-memory", "Activation memory", body, _intro(), _chart(totals))


def _cards(section: ActivationMemory) -> list[tuple[str, str, str]]:
    cards = [("saved for backward", human_bytes(section.saved_bytes), "")]
    if section.outside_bytes:
        cards.append(("of it by the loss", human_bytes(section.outside_bytes), ""))
    root = next((t for t in section.totals() if t.parent is None), None)
    if root is not None:
        cards.append(("parameters", human_bytes(root.params), ""))
        if root.grads is not None:
            cards.append(("gradients", human_bytes(root.grads), ""))
        if root.optimizer is not None:
            cards.append(("optimizer state", human_bytes(root.optimizer), ""))
    for peak in section.peaks:
        cards.append((f"peak in {peak.phase}", human_bytes(peak.peak_bytes), ""))
    return cards


def _leaves(totals: list[MemoryTotals]) -> list[MemoryTotals]:
    heavy = sorted((t for t in totals if t.activations_self > 0), key=lambda t: -t.activations_self)
    return heavy[:_CHART_LAYERS]


def _chart(totals: list[MemoryTotals]) -> dict[str, Chart]:
    top = _leaves(totals)
    if not top:
        return {}
    return {
        "lp-activation-memory-chart": bars(
            "Saved for backward, by the layer that saved it",
            [t.path or "(root)" for t in top],
            [BarSeries("saved", tuple(t.activations_self / _MIB for t in top))],
            axis="MiB",
        )
    }


def _chart_html(totals: list[MemoryTotals]) -> str:
    top = _leaves(totals)
    return chart_slot("lp-activation-memory-chart", tall=len(top) > 10) if top else ""


def _intro() -> str:
    return (
        "Bytes each layer's forward saves for backward (torch.autograd's saved tensors),"
        " counted once per storage; parameters and buffers are not activations, and a"
        " tensor belongs to the innermost layer that saved it first. Activations include"
        " the layer's children; Self does not. Parameters, gradients and optimizer state"
        " are the bytes of the layer's own parameters and of everything below it, read"
        " after one training step. See docs/definitions.md, Activation memory."
    )
