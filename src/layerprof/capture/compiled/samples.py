"""An attribution -> the usual per-layer samples and the typed ``compiled`` section.

Per profiled forward, each module path's self time is the kernel time credited
to it; ``<compiled overhead>`` and ``<outside compiled region>`` are rows of
their own under the root, so each forward's rows add up to the measured
forward exactly. Backward windows fill the backward fields the same way; on
CUDA the GPU durations fill the device fields.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from layerprof.pivot.notes import Note
from layerprof.pivot.profile import ancestors
from layerprof.pivot.records import (
    BUCKET_TYPE,
    OUTSIDE_ROW,
    OVERHEAD_ROW,
    LayerInfo,
    LayerSamples,
)
from layerprof.pivot.sections.compiled import (
    CompiledGraph,
    CompiledKernel,
    CompiledSection,
    Coverage,
    GraphBreak,
    KernelShare,
    PathTime,
    Recompile,
    UnmatchedKernel,
)
from layerprof.trace.compiled import CompiledAttribution, PhaseWindow
from layerprof.units import NS_PER_MS

_TOP_UNMATCHED = 5
#: Beyond this share of backward kernel time on nodes with no module stack, the
#: backward paths are guesses: no backward rows are shown.
_BACKWARD_STACKLESS_SHARE = 0.5


@dataclass(frozen=True)
class RunFacts:
    """What the run knew besides the trace: options, compile events, eager call counts."""

    torch: str
    mode: str
    dynamic: bool | None
    split: str
    regions: tuple[str, ...]
    recompiled: bool
    compile_ns: int
    frames: Mapping[str, str]  # compile id -> "forward (model.py:12)"
    breaks: tuple[GraphBreak, ...]
    recompiles: tuple[Recompile, ...]
    calls: Mapping[str, float]  # eager calls per forward, by path


def bucket_infos() -> tuple[LayerInfo, ...]:
    return tuple(
        LayerInfo(path=p, type=BUCKET_TYPE, parent="") for p in (OVERHEAD_ROW, OUTSIDE_ROW)
    )


def layer_samples(
    att: CompiledAttribution, layers: Sequence[LayerInfo], calls: Mapping[str, float]
) -> dict[str, LayerSamples]:
    """Per path and per profiled forward: self (credited kernel time) and total (its subtree)."""
    fwd = att.windows["forward"]
    bwd = [] if backward_problem(att) else att.windows["backward"]
    known = [i.path for i in layers]
    host = _per_path(fwd, known, _host_parts)
    device = _per_path(fwd, known, _device_parts) if att.device else None
    back = _per_path(bwd, known, _host_parts) if bwd else None
    out: dict[str, LayerSamples] = {}
    for path in known:
        self_, total = host[path]
        dev = device[path] if device is not None else (None, None)
        bw = back[path] if back is not None else (None, None)
        out[path] = LayerSamples(
            total_ns=total,
            self_ns=self_,
            calls=1.0 if path in (OVERHEAD_ROW, OUTSIDE_ROW) else calls.get(path, 0.0),
            device_total_ns=dev[1],
            device_self_ns=dev[0],
            backward_total_ns=bw[1],
            backward_self_ns=bw[0],
        )
    return out


def _host_parts(w: PhaseWindow) -> dict[str, int]:
    return {**w.paths, OVERHEAD_ROW: w.overhead_ns, OUTSIDE_ROW: w.outside_ns}


def _device_parts(w: PhaseWindow) -> dict[str, int]:
    return {**w.device_paths, OVERHEAD_ROW: w.device_overhead_ns, OUTSIDE_ROW: w.device_outside_ns}


def _per_path(
    windows: Sequence[PhaseWindow], known: Sequence[str], parts_of: object
) -> dict[str, tuple[list[int], list[int]]]:
    """(self per iteration, total per iteration) of every known path."""
    out = {p: ([0] * len(windows), [0] * len(windows)) for p in known}
    for i, w in enumerate(windows):
        for path, ns in parts_of(w).items():  # type: ignore[operator]
            if path not in out:
                continue  # resolved paths are always known; kept safe for odd traces
            out[path][0][i] += ns
            for p in (path, *ancestors(path)):
                if p in out:
                    out[p][1][i] += ns
    return out


def coverage(windows: Sequence[PhaseWindow], *, device: bool = False) -> Coverage | None:
    """Means per window; the parts add up to ``forward_ns`` (outside takes the rounding)."""
    n = len(windows)
    if n == 0:
        return None

    def mean(values: Sequence[int]) -> int:
        return round(sum(values) / n)

    forward = mean([w.span_ns for w in windows])
    attributed = mean([w.kernel_ns for w in windows])
    overhead = mean([w.overhead_ns for w in windows])
    return Coverage(
        forward_ns=forward,
        region_ns=mean([w.region_ns for w in windows]),
        attributed_ns=attributed,
        shared_ns=mean([w.shared_ns for w in windows]),
        overhead_ns=overhead,
        outside_ns=forward - attributed - overhead,
        unmatched_ns=mean([w.unmatched_ns for w in windows]),
    )


def build_section(att: CompiledAttribution, facts: RunFacts) -> CompiledSection:
    n = {phase: max(len(ws), 1) for phase, ws in att.windows.items()}
    graphs = tuple(
        CompiledGraph(
            key=u.record.key,
            compile_id=u.record.compile_id,
            frame=facts.frames.get(u.record.compile_id, "?"),
            phase=u.record.phase,
            sites=len(u.record.sites),
            calls=u.calls / n[u.record.phase],
            kernel_ns=round((u.device_ns if att.device else u.host_ns) / n[u.record.phase]),
        )
        for u in att.graphs.values()
    )
    kernels = []
    untrusted = "backward" if backward_problem(att) else None
    for k in sorted(
        att.kernels.values(), key=lambda k: -(k.device_ns if att.device else k.host_ns)
    ):
        time = k.device_ns if att.device else k.host_ns
        whole = sum(k.by_path.values())
        kernels.append(
            CompiledKernel(
                name=k.name,
                extern=k.extern,
                phase=k.phase,
                calls=k.calls / n[k.phase],
                time_ns=round(time / n[k.phase]),
                estimated=k.estimated,
                split=()
                if k.phase == untrusted
                else tuple(
                    KernelShare(path=p, share=ns / whole if whole else 0.0)
                    for p, ns in sorted(k.by_path.items(), key=lambda kv: -kv[1])
                ),
            )
        )
    return CompiledSection(
        torch=facts.torch,
        mode=facts.mode,
        dynamic=facts.dynamic,
        split=facts.split,
        regions=facts.regions,
        recompiled=facts.recompiled,
        device_time=att.device,
        compile_ns=facts.compile_ns,
        iterations=att.iterations("forward"),
        graphs=graphs,
        breaks=facts.breaks,
        recompiles=facts.recompiles,
        coverage=coverage(att.windows["forward"])
        or Coverage(forward_ns=0, region_ns=0, attributed_ns=0, shared_ns=0, overhead_ns=0,
                    outside_ns=0),
        backward=coverage(att.windows["backward"]),
        kernels=tuple(kernels),
        paths=_path_times(att, n),
        unmatched=tuple(
            UnmatchedKernel(name=name, calls=c / n["forward"], time_ns=round(ns / n["forward"]))
            for name, (c, ns) in sorted(att.unmatched.items(), key=lambda kv: -kv[1][1])
        ),
    )  # fmt: skip


def backward_problem(att: CompiledAttribution) -> str | None:
    """Why the backward kernels' paths cannot be trusted on this run (None: they can).

    The backward mapping rests on private torch state (the provenance map code
    generation fills, ``fwd_nn_module_stack`` on backward nodes): where it is
    missing, the layers get no backward time rather than a wrong one."""
    fwd, bwd = att.windows["forward"], att.windows["backward"]
    if not bwd:
        return None
    if len(bwd) != len(fwd):
        return f"{len(bwd)} profiled backward(s) for {len(fwd)} forward(s) do not pair up"
    kernel_ns = sum(w.kernel_ns for w in bwd)
    if kernel_ns == 0:
        return (
            "no backward kernel event matched a call site (this torch gave no provenance"
            " for the backward graphs)"
        )
    stackless = att.stackless_ns.get("backward", 0)
    if stackless > _BACKWARD_STACKLESS_SHARE * kernel_ns:
        return (
            f"{100 * stackless / kernel_ns:.0f}% of the backward kernel time ran nodes with no"
            " forward module stack (fwd_nn_module_stack) on this torch"
        )
    return None


def _path_times(att: CompiledAttribution, n: Mapping[str, int]) -> tuple[PathTime, ...]:
    keys = sorted(set(att.exact) | set(att.estimated))
    if backward_problem(att):
        keys = [k for k in keys if k[0] != "backward"]
    return tuple(
        PathTime(
            path=path,
            exact_ns=round(att.exact.get((phase, path), 0) / n[phase]),
            estimated_ns=round(att.estimated.get((phase, path), 0) / n[phase]),
            phase=phase,
        )
        for phase, path in keys
    )


def notes(att: CompiledAttribution, section: CompiledSection) -> list[Note]:
    """What the compiled rows depend on, one line each."""
    cov = section.coverage
    out = [
        Note(
            "compiled-attribution",
            f"compiled ({section.mode}, torch {section.torch}): layer times are inductor kernel"
            f" times{' on the GPU' if section.device_time else ''}; extern kernels (matmul, conv,"
            f" attention) go to their module exactly, fused kernels spanning several modules are"
            f" split by {section.split}; {100 * cov.attributed_share:.1f}% of the compiled"
            f" regions' time is attributed ({cov.shared_ns / NS_PER_MS:.3f} ms per forward of it"
            " estimated)",
            {"attributed_share": cov.attributed_share, "estimated_ns": cov.shared_ns},
        )
    ]
    if section.recompiled:
        where = ", ".join(r or "(the whole model)" for r in section.regions)
        out.append(
            Note(
                "recompiled-for-attribution",
                f"the model was already compiled; layerprof compiled it again ({where}) with its own"
                " backend, because attributing kernels needs inductor's provenance tracking and"
                " kernel profiling, which change the compiled code and its cache key",
                {"regions": tuple(section.regions)},
            )
        )
    if att.unmatched:
        names = sorted(att.unmatched, key=lambda k: -att.unmatched[k][1])
        shown = ", ".join(names[:_TOP_UNMATCHED]) + (" ..." if len(names) > _TOP_UNMATCHED else "")
        out.append(
            Note(
                "unmatched-kernels",
                f"{len(names)} kernel event name(s) inside compiled graphs matched no call site"
                f" ({shown}): their {cov.unmatched_ns / NS_PER_MS:.3f} ms per forward are in"
                f" {OVERHEAD_ROW}",
                {"names": tuple(names), "ns_per_forward": cov.unmatched_ns},
            )
        )
    if att.unknown_graphs:
        out.append(
            Note(
                "unknown-graphs",
                f"{att.unknown_graphs} compiled graph call(s) belong to graphs layerprof did not"
                f" compile (another backend?): their time is in {OVERHEAD_ROW}",
                {"count": att.unknown_graphs},
            )
        )
    per_forward = max(att.iterations("forward"), 1)  # (a backward is part of its step)
    if att.unresolved_nodes:
        out.append(
            Note(
                "unresolved-nodes",
                f"{att.unresolved_nodes / per_forward:g} node(s) per step named no module path"
                " under their compiled frame: their time went to the frame's own module",
                {"per_step": att.unresolved_nodes / per_forward},
            )
        )
    if att.inferred_nodes:
        out.append(
            Note(
                "inferred-nodes",
                f"{att.inferred_nodes / per_forward:g} node(s) per step had no module stack (a"
                " pattern pass wrote them, e.g. attention as one SDPA op): each went to the common"
                " module of its graph neighbours",
                {"per_step": att.inferred_nodes / per_forward},
            )
        )
    problem = backward_problem(att)
    if problem:
        out.append(
            Note(
                "backward-not-split",
                f"backward: {problem}; the layers show no backward time rather than a wrong one"
                " (the backward kernels are still listed, without their split over layers)",
                {"problem": problem},
            )
        )
    if att.backward_prefix_missing:
        out.append(
            Note(
                "backward-prefix-missing",
                f"{att.backward_prefix_missing} backward graph call(s) had no forward call to take"
                " their module prefix from: their paths are relative to the model",
                {"count": att.backward_prefix_missing},
            )
        )
    if cov.forward_ns and cov.outside_ns > 0.1 * cov.forward_ns:
        share = 100 * cov.outside_ns / cov.forward_ns
        out.append(
            Note(
                "outside-compiled",
                f"{share:.0f}% of the forward ran outside compiled regions"
                f"{f' ({len(section.breaks)} graph break reason(s))' if section.breaks else ''}:"
                f" that time is in {OUTSIDE_ROW}; profile without --compile for those layers'"
                " eager times",
                {"share": share / 100, "breaks": len(section.breaks)},
            )
        )
    return out


def break_diff(before: Mapping[str, int], after: Mapping[str, int]) -> tuple[GraphBreak, ...]:
    """Graph breaks counted between two snapshots of Dynamo's counters, by first line."""
    reasons: dict[str, int] = defaultdict(int)
    for key, count in after.items():
        added = count - before.get(key, 0)
        if added > 0:
            first = next((ln.strip() for ln in str(key).splitlines() if ln.strip()), str(key))
            reasons[first] += added
    return tuple(GraphBreak(reason=r, count=c) for r, c in sorted(reasons.items()))
