"""Findings about the two passes of a live run: do they agree, and did they run the same code?

* **Agreement** (``pass_gap``): the per-layer pass's forward (the root's measured
  total) against the clean latency, both as 95 % confidence intervals of the
  median. A per-layer pass *faster* than the clean one beyond ``_PASS_BOUND``
  cannot come from the code (it does more work): something else used the CPU
  while the clean pass ran. Slower beyond the bound and beyond the
  instrumentation's calibrated cost (``Overhead.per_forward_ns``: the hooks'
  per-call cost, or in ops mode the profiler's per-operator and per-range
  cost): contention during the per-layer pass, or another code path. Medians
  ``_GROSS_BOUND`` apart disagree even where a pass's interval is wide enough to
  hold the other (a bimodal pass: some forwards stalled).
* **Code paths** (``Profile.passes``, from ``layerprof.capture.fastpath``): layers
  that ran torch's fused fast path, whether the per-layer pass did too, and
  modules called in one pass only.
* **Never called**: layers with 0 calls under a parent that ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from layerprof.analysis.finding import Finding
from layerprof.units import human_time

if TYPE_CHECKING:
    from layerprof.pivot.profile import LayerRow, Profile
    from layerprof.pivot.records import Meta, Overhead
    from layerprof.pivot.sections.passes import FusedLayer
    from layerprof.stats import Summary

_PASS_BOUND = 1.5  # passes whose forwards differ by more than this (beyond their CIs) disagree
#: Medians this far apart disagree even inside a confidence interval: a bimodal clean
#: pass (8 of 20 forwards stalled) spans 68 µs-20 ms, and a 275x gap hid in it.
_GROSS_BOUND = 4.0
_LIST = 4  # names listed in a finding before "and N more"

_Gap = Literal["clean slower", "layers slower"]


def live(profile: Profile) -> bool:
    """A live run: a clean pass and a per-layer pass of the same model."""
    return profile.meta.source == "layerprof.run"


# ---- agreement -------------------------------------------------------------------------


def pass_gap(profile: Profile) -> tuple[_Gap, float] | None:
    """How the passes disagree beyond noise and ``_PASS_BOUND``, and the ratio
    per-layer / clean of their medians; None when they agree or cannot be compared."""
    lat = profile.latency
    layer = layer_pass_forward(profile)
    if not live(profile) or lat is None or layer is None or lat.median <= 0:
        return None
    clean_lo, clean_hi = interval(lat)
    layer_lo, layer_hi = interval(layer)
    o = profile.overhead
    # a corrected pass had the calibrated cost taken out already; else allow for it
    hooks = o.per_forward_ns if o is not None and not o.corrected else 0.0
    ratio = layer.median / lat.median
    if (layer_hi + hooks) * _PASS_BOUND < clean_lo or (
        layer_hi + hooks
    ) * _GROSS_BOUND < lat.median:
        return "clean slower", ratio
    if o is not None and (
        layer_lo > (clean_hi + hooks) * _PASS_BOUND
        or layer_lo > (lat.median + hooks) * _GROSS_BOUND
    ):
        return "layers slower", ratio
    return None


def layer_pass_forward(profile: Profile) -> Summary | None:
    """The root layer's measured total per forward (the larger of host and device)."""
    roots = [i.path for i in profile.layers if i.parent is None]
    s = profile.samples.get(roots[0]) if len(roots) == 1 else None
    if s is None or not s.calls:
        return None
    host = s.total_ns.summary
    device = s.device_total_ns.summary if s.device_total_ns is not None else None
    return device if device is not None and device.median > host.median else host


def interval(s: Summary) -> tuple[float, float]:
    """The median's confidence interval (the median itself where unknown)."""
    lo = s.ci_low if s.ci_low is not None else s.median
    hi = s.ci_high if s.ci_high is not None else s.median
    return lo, hi


def agreement_findings(profile: Profile) -> list[Finding]:
    gap = pass_gap(profile)
    if gap is None:
        return []
    kind, ratio = gap
    lat, layer, o = profile.latency, layer_pass_forward(profile), profile.overhead
    assert lat is not None and layer is not None
    both = (
        f"clean pass {_ci_text(lat)}, per-layer pass {_ci_text(layer)} per forward ({ratio:.2f}x)"
    )
    diverged = profile.passes.diverged if profile.passes is not None else ()
    if kind == "layers slower" and diverged:
        return []  # the code-path finding explains it, with this ratio
    if kind == "clean slower" and diverged:
        why = (
            f"{both}. The per-layer pass ran other code ({_names(diverged)} off torch's fast"
            " path), but a fast path is not slower than the code it replaces: most likely"
            " something else used the CPU while the clean pass ran."
        )
    elif kind == "clean slower":
        why = (
            f"{both}. The per-layer pass does more work than the clean one, so it cannot be"
            " faster by the code: something else used the CPU while the clean pass ran."
        )
    else:
        why = (
            f"{both}, more than its instrumentation's calibrated cost"
            f" ({cost_text(o)}) and the noise of both passes explain."
            " Something else used the CPU while the per-layer pass ran, or the model runs"
            " other code when instrumented."
        )
    return [
        Finding(
            "high",
            "the numbers are unreliable: the clean and the per-layer pass disagree",
            f"{why} {contention_cause(profile.meta)}",
            threads_hint(profile.meta),
        )
    ]


def cost_text(o: Overhead | None) -> str:
    """The calibrated cost per forward and what it is made of."""
    if o is None or not o.measured:
        return "unknown"
    if o.method == "ops":
        return (
            f"{human_time(o.per_forward_ns)} per forward: {human_time(o.per_op_ns)} per"
            " recorded operator"
            f" x {o.ops_per_forward:g} and {human_time(o.per_call_ns)} per layer range"
            f" x {o.calls_per_forward:g}"
        )
    return (
        f"{human_time(o.per_forward_ns)} per forward: {human_time(o.per_call_ns)} per"
        f" module call x {o.calls_per_forward:g}"
    )


def _ci_text(s: Summary) -> str:
    lo, hi = interval(s)
    return f"{human_time(s.median)} (95% CI {human_time(lo)}-{human_time(hi)})"


def contention_cause(meta: Meta) -> str:
    """Why the CPU was shared, from what the run recorded (threads, CPUs, load)."""
    cpus = meta.extra.get("cpus")
    load = meta.extra.get("load_avg")
    threads = meta.threads
    said = []
    if isinstance(cpus, int) and threads and threads > cpus:
        said.append(f"torch ran {threads} threads on {cpus} CPUs")
    if isinstance(cpus, int) and isinstance(load, (int, float)) and load > cpus:
        said.append(
            f"the 1-minute load average was {load:.1f} on {cpus} CPUs (this run included):"
            " other processes competed for them"
        )
    if said:
        return "Here " + "; ".join(said) + "."
    return "Likely causes: other processes or threads on the same CPUs."


def threads_hint(meta: Meta) -> str:
    cpus = meta.extra.get("cpus")
    fewer = f" (this machine lets it use {cpus} CPUs)" if isinstance(cpus, int) else ""
    return (
        f"run again on a quiet machine, with --threads N below the CPU count{fewer};"
        " until then trust neither the latency line nor the layer shares"
    )


# ---- code paths --------------------------------------------------------------------------


def code_path_findings(profile: Profile) -> list[Finding]:
    check = profile.passes
    if check is None:
        return []
    out: list[Finding] = []
    groups: dict[tuple[str, str, bool], list[FusedLayer]] = {}
    for f in check.fused:
        groups.setdefault((f.type, f.op, f.in_layer_pass), []).append(f)
    for (type_, op, same), layers in groups.items():
        if same:
            out.append(_fused_finding(profile, type_, op, layers))
        else:
            out.append(_diverged_finding(profile, type_, op, layers))
    fused = {f.layer for f in check.fused}
    others = [p for p in (*check.clean_only, *check.layer_only) if p not in fused]
    if others:
        out.append(
            Finding(
                "warning",
                f"{_count(others, 'layer')} ran in only one of the two passes",
                (f"called in the clean pass only: {_names(check.clean_only)}. " if check.clean_only else "")
                + (f"called in the per-layer pass only: {_names(check.layer_only)}. " if check.layer_only else "")
                + "The model takes another path when it is instrumented (or its state"
                " changes between forwards), so the layer rows do not describe the latency line.",
                "look for code that checks for hooks, a counter or randomness in forward",
                others[0],
            )
        )  # fmt: skip
    return out


def _diverged_finding(profile: Profile, type_: str, op: str, layers: list[FusedLayer]) -> Finding:
    paths = [f.layer for f in layers]
    gap = pass_gap(profile)
    ratio = f" The per-layer forward took {gap[1]:.2f}x the clean one." if gap else ""
    why = (
        f"{type_} refuses its fast path while forward hooks are attached to it (another"
        " tool's or the model's own: layerprof wraps forward and attaches none), or the"
        " model chose the slow path while watched"
        if "TransformerEncoderLayer" in type_
        else "the instrumented pass did not take the fast path"
    )
    uncounted = _flop_sentence(profile, paths, "their")
    return Finding(
        "warning",
        f"the per-layer pass ran other code than the clean pass in {_count(paths, type_)}",
        f"in the clean pass {_names(paths)} ran torch's fused {op}; {why}, so the"
        f" per-layer pass ran their submodules one by one. Their rows time the unfused"
        f" path, not the code behind the latency line.{ratio}{uncounted}",
        "trust the latency line for speed; to make both passes run the unfused code call"
        " torch.backends.mha.set_fastpath_enabled(False) before profiling",
        paths[0],
    )


def _flop_sentence(profile: Profile, paths: list[str], its: str) -> str:
    """What the FLOP counter made of fused layers: counted by layerprof's formula for the
    fused kernel (layerprof.capture.flops.formulas), or not counted (an older file's counter,
    or a kernel with no formula) - never a silent 0."""
    infos = [i for i in profile.layers if i.path in paths]
    if not infos or all(i.flops is None and i.flop_detail is None for i in infos):
        return ""
    share = [i.flop_detail.uncounted_share for i in infos if i.flop_detail is not None]
    if any(i.flops == 0 for i in infos) or any(s is not None and s > 0.5 for s in share):
        return (
            f" {its.capitalize()} FLOPs are not counted (the FLOP counter has no formula for"
            " the fused kernel)."
        )
    return (
        f" {its.capitalize()} FLOPs are counted from the fused kernel's shapes"
        " (layerprof's formula for it, docs/flops.md)."
    )


def _fused_finding(profile: Profile, type_: str, op: str, layers: list[FusedLayer]) -> Finding:
    paths = [f.layer for f in layers]
    skipped = sorted({p.rsplit(".", 1)[-1] for f in layers for p in f.skipped})
    its = "its" if len(paths) == 1 else "their"
    return Finding(
        "info",
        f"{_count(paths, type_)} ran torch's fused fast path",
        f"{_names(paths)} ran {op} in both passes; {its} submodules ({_names(skipped)})"
        f" never ran and show 0 calls: the fused kernel does their work, which is in"
        f" {its} own self time."
        + _flop_sentence(profile, paths, its),
        "torch.backends.mha.set_fastpath_enabled(False) times the submodules one by one"
        " (the unfused path, slower than what inference runs)",
        paths[0],
    )  # fmt: skip


def never_called_findings(profile: Profile, rows: Sequence[LayerRow]) -> list[Finding]:
    """Layers with 0 calls (nor any descendant called) under a parent that ran, that no
    fused path explains: unused modules or a branch not taken."""
    called = {r.path for r in rows if r.calls}
    explained = {p for f in profile.passes.fused for p in f.skipped} if profile.passes else set()
    ran_below = {a for p in called for a in _ancestors(p)}
    idle = [
        r.path
        for r in rows
        if not r.calls
        and r.parent in called
        and r.path not in ran_below
        and r.path not in explained
    ]
    if not idle:
        return []
    return [
        Finding(
            "info",
            f"{_count(idle, 'layer')} never ran although {'its' if len(idle) == 1 else 'their'}"
            " parent did",
            f"{_names(idle)}: 0 calls per forward. Unused modules, a branch not taken with"
            " these inputs, or work done by the parent itself (its self time).",
            "",
            idle[0],
        )
    ]


def _ancestors(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(len(parts))] if path else []


def _count(items: Sequence[str], noun: str) -> str:
    return f"1 {noun}" if len(items) == 1 else f"{len(items)} {noun}s"


def _names(items: Sequence[str]) -> str:
    shown = [i or "(root)" for i in items[:_LIST]]
    more = len(items) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")
