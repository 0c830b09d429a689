"""Findings: what the bottleneck is and what to try, from a Profile or a trace analysis.

Each rule reads numbers the profile already holds and states them in the
finding, so a reader can check it. Rules never print; renderers show them.
Thresholds are deliberately conservative: a finding should be worth reading.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from layerprof.analysis.compiled import compiled_findings, is_bucket
from layerprof.analysis.distributed import distributed_findings, straggler_findings
from layerprof.analysis.finding import ORDER, Finding, Severity
from layerprof.analysis.generation import (
    DECODE_LAYER_SHARE,
    LM_HEAD_SHARE,
    LOW_BANDWIDTH,
    generation_findings,
    has_generation,
)
from layerprof.analysis.loop import BACKWARD_RATIO, DATA_SHARE, loop_findings, table_agreement
from layerprof.analysis.memory import has_activation_memory, memory_findings
from layerprof.analysis.passes import (
    agreement_findings,
    code_path_findings,
    contention_cause,
    cost_text,
    interval,
    live,
    never_called_findings,
    pass_gap,
    threads_hint,
)
from layerprof.analysis.roofline import (
    LOW_PEAK,
    RELIABLE_COVERAGE,
    coverage_findings,
    has_coverage,
    has_peak,
    roofline_findings,
)
from layerprof.stats import Summary
from layerprof.units import human_count, human_time

if TYPE_CHECKING:
    from layerprof.pivot.profile import LayerRow, Profile, Run
    from layerprof.pivot.records import Overhead
    from layerprof.pivot.sections.trace import CrossRank, DeviceUse

__all__ = [
    "RULES",
    "Finding",
    "Rule",
    "Severity",
    "checks",
    "diagnose",
    "diagnose_run",
    "run_checks",
]
_ORDER = ORDER

BOTTLENECK_SHARE = 0.25  # a layer whose self time is this share of the forward
PARENT_SELF_SHARE = 0.15  # functional work inside a container's forward
# Below this a layer's self time is not worth a finding, whatever its share: in a
# 30 µs model "the bottleneck" at 6 µs is hook residue and noise, not a lead.
MIN_FINDING_NS = 50_000
SMALL_LAYER_NS = 20_000  # layers below this total are dominated by per-call overhead
_SMALL_LAYERS_SHARE = 0.30
_COLD_RATIO = 5.0
_NOISY_P90_RATIO = 1.3
_OVERHEAD_RATIO = 1.5
# the calibrated cost must account for at least half the instrumented pass's excess
# over the clean pass's noise interval, or the excess is named noise
_EXPLAINED_SHARE_INV = 2.0
_GPU_UTIL_LOW = 0.5
_MEMCPY_SHARE = 0.10
_COMM_SHARE = 0.30
_RANK_SPREAD = 0.10
_TOP_OPS = 3  # operators named in an ops-mode finding

_HINTS = {
    "Conv": "try channels_last memory format, torch.backends.cudnn.benchmark=True on GPU,"
    " or bf16/fp16 autocast",
    "Linear": "on GPU try bf16 autocast or TF32 (torch.set_float32_matmul_precision('high'));"
    " on CPU a larger batch uses the cores better",
    "Embedding": "embedding lookups are memory-bound: smaller dims or fused/sparse variants help",
    "Norm": "normalization is memory-bound: fuse it with its neighbours (torch.compile)",
    "Pool": "pooling is memory-bound: channels_last memory format is often faster on CPU,"
    " or fuse it (torch.compile)",
    "Attention": "use torch.nn.functional.scaled_dot_product_attention (fused, flash/mem-efficient kernels)",
}


@dataclass(frozen=True)
class Rule:
    """One check: ``name`` (with its criterion, listed when nothing is flagged),
    whether it ``applies`` to a profile (it has the numbers the rule reads), and the
    findings it gives."""

    name: str
    applies: Callable[[Profile], bool]
    find: Callable[[Profile], list[Finding]]


def diagnose(profile: Profile) -> list[Finding]:
    """Findings about a profiled model, most severe first."""
    out: list[Finding] = []
    for rule in RULES:
        if rule.applies(profile):
            out += rule.find(profile)
    return sorted(out, key=lambda f: _ORDER[f.severity])


def checks(profile: Profile) -> list[str]:
    """The rules that looked at this profile (what "nothing to flag" means)."""
    return [rule.name for rule in RULES if rule.applies(profile)]


def run_checks(run: Run) -> list[str]:
    """The rules that looked at any rank of ``run``, and the cross-rank one."""
    names = dict.fromkeys(c for p in run.ranks for c in checks(p))
    if run.cross is not None or run.stragglers is not None:
        names["stragglers across ranks"] = None
    return list(names)


def _timed_rows(profile: Profile) -> tuple[list[LayerRow], float]:
    """Rows of layers that ran (not a compiled run's bucket rows), and the root total
    (sum of root rows)."""
    all_rows = profile.rows()
    root_total = sum(r.total_ns for r in all_rows if r.parent is None)
    return [r for r in all_rows if r.calls and not is_bucket(r)], root_total


def _has_layers(profile: Profile) -> bool:
    rows, root_total = _timed_rows(profile)
    return root_total > 0 and bool(rows)


def _type_hint(profile: Profile, row: LayerRow, has_children: bool) -> str:
    for key, hint in _HINTS.items():
        if key.lower() in row.type.lower():
            return hint
    if profile.ops:  # ops mode: the detail names its operators; never "run with --ops"
        return "look at its operators in the tables above, and at its input shapes and dtype"
    if has_children:
        return "its own forward does the work (functional ops): run with --ops to see which"
    return "look at its input shapes and dtype; run with --ops to see its operators"


def _top_ops(profile: Profile, path: str) -> str:
    """Ops mode: "; its top operators: aten::addmm 1.2 ms, ..." ("" without ops, and
    without ops tied to layers: a trace's ops are, but not to these layers)."""
    if not any(o.layer is not None for o in profile.ops):
        return ""
    own = sorted(
        (o for o in profile.ops if o.layer == path and o.phase == "forward"),
        key=lambda o: -o.self_ns,
    )
    if not own:
        return "; no operators ran in its own code (Python work)"
    shown = ", ".join(f"{o.name} {human_time(o.self_ns)}" for o in own[:_TOP_OPS])
    return f"; its {'top ' if len(own) > _TOP_OPS else ''}operators: {shown}"


def _self_time(row: LayerRow) -> float:
    """Device self time where measured (CUDA): host time there is mostly launch cost."""
    return row.device_self_ns if row.device_self_ns is not None else row.self_ns


def _self_interval(profile: Profile, row: LayerRow) -> tuple[float, float]:
    """The 95 % confidence interval of the self time the rules use (host, or device).

    A layer whose number of calls varies has a mean, not a median, per forward: its
    interval is the value itself."""
    value = _self_time(row)
    s = profile.samples.get(row.path)
    if s is None or row.calls_vary:
        return value, value
    series = s.device_self_ns if row.device_self_ns is not None else s.self_ns
    if series is None:
        return value, value
    lo, hi = interval(series.summary)
    return min(lo, value), max(hi, value)


def _ci(lo: float, hi: float) -> str:
    return "" if lo == hi else f" (95% CI {human_time(lo)}-{human_time(hi)})"


def _share_low(profile: Profile, row: LayerRow, whole: float) -> float:
    """The low end of the 95 % CI of the layer's share of the forward.

    With per-iteration samples, the share of each iteration (self / root total of
    the same iteration): contention that slows a whole forward leaves it alone.
    Without them (a summary-only file), the self time's CI low over ``whole``."""
    lo, _ = _self_interval(profile, row)
    fallback = lo / whole if whole > 0 else 0.0
    device = row.device_self_ns is not None
    s = profile.samples.get(row.path)
    roots = [i.path for i in profile.layers if i.parent is None]
    root = profile.samples.get(roots[0]) if len(roots) == 1 else None
    if s is None or root is None or row.calls_vary:
        return fallback
    own = s.device_self_ns if device else s.self_ns
    total = root.device_total_ns if device else root.total_ns
    if own is None or total is None or own.values is None or total.values is None:
        return fallback
    if len(own.values) != len(total.values) or not (total.values > 0).all():
        return fallback
    return interval(Summary.of(own.values / total.values))[0]


def _significant(profile: Profile, row: LayerRow, whole: float, share: float) -> bool:
    """At least ``share`` of the forward and ``MIN_FINDING_NS``, both at their CI's low end."""
    lo, _ = _self_interval(profile, row)
    return whole > 0 and lo >= MIN_FINDING_NS and _share_low(profile, row, whole) >= share


def _bottleneck(profile: Profile) -> list[Finding]:
    rows, root_total = _timed_rows(profile)
    parents = {r.parent for r in rows}
    # A model with no child layers is trivially its own bottleneck: say nothing.
    candidates = [r for r in rows if r.parent is not None or r.path in parents]
    if not candidates:
        return []
    device = any(r.device_self_ns is not None for r in candidates)
    whole = sum(r.device_total_ns or 0 for r in rows if r.parent is None) if device else root_total
    found = [r for r in candidates if _significant(profile, r, whole, BOTTLENECK_SHARE)]
    found.sort(key=lambda r: -_self_time(r))
    out = []
    for r in found:
        lo, hi = _self_interval(profile, r)
        what = "the bottleneck" if len(found) == 1 else "a bottleneck"
        out.append(
            Finding(
                "high",
                f"{r.path or r.type} ({r.type}) is {what}",
                f"its {'device ' if device else ''}self time is {human_time(_self_time(r))}"
                f" per forward{_ci(lo, hi)}, {100 * _self_time(r) / whole:.0f}% of the"
                f" model's {human_time(whole)}" + _throughput(r) + _top_ops(profile, r.path) + ".",
                _type_hint(profile, r, r.path in parents),
                r.path,
            )
        )
    return out


def _throughput(row: LayerRow) -> str:
    """Achieved FLOP rate of a leaf, which says whether it is compute- or overhead-bound."""
    time_ns = row.device_total_ns if row.device_total_ns is not None else row.total_ns
    if not row.flops or time_ns <= 0:
        return ""
    return f"; {human_count(row.flops)} FLOPs at {row.flops / time_ns:.1f} GFLOP/s"


def _parent_self(profile: Profile) -> list[Finding]:
    rows, root_total = _timed_rows(profile)
    parents = {r.parent for r in rows if r.parent is not None}
    out = []
    for r in rows:
        if r.path not in parents or not _significant(profile, r, root_total, PARENT_SELF_SHARE):
            continue
        if r.self_ns / root_total >= BOTTLENECK_SHARE:
            continue  # the bottleneck rule's (on device) or not significant there
        lo, hi = _self_interval(profile, r)
        out.append(
            Finding(
                "warning",
                f"{r.path or r.type} spends {100 * r.self_ns / root_total:.0f}% of the forward"
                " outside its child modules",
                f"{human_time(r.self_ns)} of self time{_ci(lo, hi)} in a layer that has child"
                " modules: functional calls (softmax, matmul, reshapes) inside its forward"
                + _top_ops(profile, r.path)
                + ".",
                ("see its operators in the tables above" if profile.ops else "run with --ops to see the operators")
                + "; fused functional ops (scaled_dot_product_attention) or torch.compile may help",
                r.path,
            )
        )  # fmt: skip
    return out


def _small_layers(profile: Profile) -> list[Finding]:
    rows, root_total = _timed_rows(profile)
    parents = {r.parent for r in rows}
    small = [r for r in rows if r.path not in parents and r.total_ns < SMALL_LAYER_NS]
    small_ns = sum(r.total_ns for r in small)
    if len(small) < 20 or small_ns / root_total < _SMALL_LAYERS_SHARE:
        return []
    return [
        Finding(
            "warning",
            f"{len(small)} leaf layers take under {human_time(SMALL_LAYER_NS)} each",
            f"together {human_time(small_ns)}, {100 * small_ns / root_total:.0f}% of the forward:"
            " per-call Python and dispatch overhead, not math, dominates them.",
            "torch.compile (fuses small ops), CUDA graphs on GPU, or a larger batch",
        )
    ]


def _zeroed(profile: Profile) -> list[Finding]:
    """Layers that ran yet read 0 ns: the measured instrumentation cost, subtracted and
    clamped at zero, was at least their whole time. Such a row says "tiny", not how tiny."""
    rows, _ = _timed_rows(profile)
    zero = [r for r in rows if r.total_ns <= 0]
    if not zero:
        return []
    names = ", ".join(r.path or "(root)" for r in zero[:3]) + (", ..." if len(zero) > 3 else "")
    return [
        Finding(
            "warning",
            f"{len(zero)} layer{'s' if len(zero) > 1 else ''} that ran read 0 ns",
            f"{names}: each ran in less time than the instrumentation's own cost, which was"
            " measured and subtracted (never below zero); their times say only that they"
            " are tiny.",
            "time them in a larger batch, or rerun with --no-correct for upper bounds",
        )
    ]


def _never_called(profile: Profile) -> list[Finding]:
    return never_called_findings(profile, profile.rows())


def _has_latency(profile: Profile) -> bool:
    lat = profile.latency
    return lat is not None and lat.median > 0


def _cold(profile: Profile) -> list[Finding]:
    lat = profile.latency
    if lat is None or profile.first_ns is None:
        return []
    _, hi = interval(lat)  # slower than the steady state's whole interval, not its median
    if profile.first_ns <= _COLD_RATIO * hi:
        return []
    return [
        Finding(
            "info",
            f"the first call is {profile.first_ns / lat.median:.0f}x slower than steady state",
            f"cold call {human_time(profile.first_ns)} vs median {human_time(lat.median)}:"
            " lazy initialisation, allocator growth, kernel selection.",
            "warm the model up before serving or timing it",
        )
    ]


def _noisy(profile: Profile) -> list[Finding]:
    lat = profile.latency
    if lat is None or lat.n < 5 or lat.p90 <= _NOISY_P90_RATIO * lat.median:
        return []
    return [
        Finding(
            "warning",
            "latency is noisy",
            f"p90 {human_time(lat.p90)} is {lat.p90 / lat.median:.2f}x the median"
            f" {human_time(lat.median)} (std {human_time(lat.std)}, n={lat.n}).",
            "close other programs, fix --threads, raise --iters; compare medians only",
        )
    ]


def _has_overhead(profile: Profile) -> bool:
    o = profile.overhead
    return o is not None and bool(o.clean_ns) and bool(o.instrumented_ns)


def _overhead(profile: Profile) -> list[Finding]:
    """The instrumented forward slower than the clean one: the instrumentation's doing
    only where its calibrated cost explains the gap beyond the clean pass's noise."""
    o, lat = profile.overhead, profile.latency
    if o is None or not o.clean_ns or not o.instrumented_ns:
        return []
    clean_lo, clean_hi = interval(lat) if lat is not None else (o.clean_ns, o.clean_ns)
    if o.instrumented_ns <= _OVERHEAD_RATIO * max(clean_hi, o.clean_ns):
        return []
    gap = pass_gap(profile)
    if gap is not None and gap[0] == "layers slower":
        return []  # not the hooks' cost: the pass-agreement or code-path finding says what
    ratio = o.instrumented_ns / o.clean_ns
    beyond_noise = o.instrumented_ns - max(clean_hi, o.clean_ns)
    if beyond_noise > _EXPLAINED_SHARE_INV * o.per_forward_ns:
        return [_overhead_noise(profile, o, ratio, clean_lo, clean_hi)]
    what = "module call" if o.method == "hooks" else "layer range and recorded operator"
    return [
        Finding(
            "warning",
            f"instrumentation slowed the forward {ratio:.1f}x",
            f"its calibrated cost, {cost_text(o)}, explains the gap; self times were"
            " corrected"
            + (" for it" if o.corrected else " (correction off)")
            + f", but shares of microsecond layers are less precise (a cost per {what}).",
            "trust the latency line for the whole model; use --ops for tiny layers"
            if o.method == "hooks"
            else "trust the latency line for the whole model; hooks mode costs less per layer",
        )
    ]


def _overhead_noise(
    profile: Profile, o: Overhead, ratio: float, clean_lo: float, clean_hi: float
) -> Finding:
    gap = (o.instrumented_ns or 0.0) - (o.clean_ns or 0.0)
    share = 100 * o.per_forward_ns / gap if gap > 0 else 0.0
    return Finding(
        "warning",
        f"the per-layer pass ran {ratio:.1f}x the clean one: machine noise, not instrumentation",
        f"instrumented forward {human_time(o.instrumented_ns or 0.0)} against the clean"
        f" {human_time(o.clean_ns or 0.0)} (95% CI {human_time(clean_lo)}-{human_time(clean_hi)});"
        f" the instrumentation's calibrated cost, {cost_text(o)}, is {share:.2g}% of that"
        " gap. The rest came from elsewhere while the per-layer pass ran, so its layer"
        f" times are inflated by load, not by the model. {contention_cause(profile.meta)}",
        threads_hint(profile.meta),
    )


def _has_root_samples(profile: Profile) -> bool:
    return (
        live(profile) and _has_latency(profile) and any(s.calls for s in profile.samples.values())
    )


def _setup(profile: Profile) -> list[Finding]:
    m = profile.meta
    out: list[Finding] = []
    if m.device.startswith("cuda") and m.dtype == "float32":
        out.append(
            Finding(
                "info",
                "float32 on a GPU",
                "the model ran in float32; tensor cores are used for bf16/fp16 (and TF32).",
                "try --dtype bfloat16, or torch.autocast in your code",
            )
        )
    # no finding for train mode: a run is in train mode only when the user asked for it
    # (--train, eval=False), and the header says "mode train"
    return out


def diagnose_run(run: Run) -> list[Finding]:
    """Findings about every rank of a run (each rank named), and across ranks."""
    out: list[Finding] = []
    for p in run.ranks:
        who = f"rank {p.rank}: " if len(run.ranks) > 1 else ""
        out += [replace(f, title=who + f.title) for f in diagnose(p)]
    out += _cross_rank(run.cross)
    out += straggler_findings(run)
    return sorted(out, key=lambda f: _ORDER[f.severity])


def _has_devices(profile: Profile) -> bool:
    return bool(profile.trace.devices) or bool(profile.trace.kinds)


def _devices(profile: Profile) -> list[Finding]:
    """GPU idle time, copies and communication, from a trace's (or ops mode's) sections."""
    out: list[Finding] = []
    for dev in profile.trace.devices:
        if dev.window_ns and dev.utilization < _GPU_UTIL_LOW:
            out.append(
                Finding(
                    "high",
                    f"GPU {dev.device} is idle {100 * (1 - dev.utilization):.0f}% of the steps",
                    f"busy {human_time(dev.busy_in_window_ns)} of a {human_time(dev.window_ns)}"
                    f" window; idle waiting on the host {human_time(dev.host_wait_ns)},"
                    f" short kernel-to-kernel gaps {human_time(dev.short_gap_ns)},"
                    f" other {human_time(dev.other_idle_ns)}.",
                    _idle_hint(dev),
                )
            )
        copy = dev.memcpy_ns + dev.memset_ns
        if dev.busy_ns > 0 and copy / dev.busy_ns > _MEMCPY_SHARE:
            out.append(
                Finding(
                    "warning",
                    f"{100 * copy / dev.busy_ns:.0f}% of GPU {dev.device}'s busy time is"
                    " memcpy/memset",
                    f"{human_time(copy)} of {human_time(dev.busy_ns)}.",
                    "pin host memory (DataLoader(pin_memory=True)), copy with non_blocking=True,"
                    " keep tensors on the device",
                )
            )
    kinds = {k.kind: k.total_ns for k in profile.trace.kinds}
    total = sum(kinds.values())
    comm = kinds.get("communication", 0)
    if total > 0 and comm / total > _COMM_SHARE:
        out.append(
            Finding(
                "warning",
                f"communication kernels take {100 * comm / total:.0f}% of kernel time",
                f"{human_time(comm)} of {human_time(total)} in NCCL/collective kernels.",
                "overlap communication with compute (bucketing, async collectives),"
                " or check for a straggler rank",
            )
        )
    return out


_IDLE_HINTS = {
    "host_wait": "the host cannot feed the GPU: look at data loading, synchronizations"
    " (.item(), .cpu()) and launch overhead (CUDA graphs, torch.compile)",
    "short_gap": "many tiny kernels: fuse them (torch.compile) or use CUDA graphs",
    "other": "the GPU waits outside kernel launches: look for host work between steps,"
    " collectives waiting on other ranks, or blocking copies",
}


def _idle_hint(dev: DeviceUse) -> str:
    """Advice for the largest idle bucket, not always the same guess."""
    buckets = {
        "host_wait": dev.host_wait_ns,
        "short_gap": dev.short_gap_ns,
        "other": dev.other_idle_ns,
    }
    return _IDLE_HINTS[max(buckets, key=lambda k: buckets[k])] if any(buckets.values()) else ""


def _cross_rank(cross: CrossRank | None) -> list[Finding]:
    if cross is None:
        return []
    medians = [r.median_step_ns for r in cross.ranks if r.median_step_ns]
    if len(medians) < 2:
        return []
    lo, hi = min(medians), max(medians)
    if hi <= lo * (1 + _RANK_SPREAD):
        return []
    return [
        Finding(
            "warning",
            f"rank {cross.slowest_rank} has the slowest steps",
            f"median step times range from {human_time(lo)} to {human_time(hi)} across"
            f" {len(medians)} ranks.",
            "compare that rank's data, kernels and host work with the others (the"
            " straggler finding, when there is one, says which rank arrives last at"
            " collectives)",
        )
    ]


#: Every check, in the order its findings are gathered (then sorted by severity). A new
#: analysis adds its rule here (see docs/architecture.md).
RULES: tuple[Rule, ...] = (
    Rule(
        f"bottleneck layers (self time >= {100 * BOTTLENECK_SHARE:.0f}% of the forward and"
        f" >= {human_time(MIN_FINDING_NS)}, at the low end of its 95% CI)",
        _has_layers,
        _bottleneck,
    ),
    Rule(
        f"work outside child modules (>= {100 * PARENT_SELF_SHARE:.0f}% and"
        f" >= {human_time(MIN_FINDING_NS)})",
        _has_layers,
        _parent_self,
    ),
    Rule("many small layers", _has_layers, _small_layers),
    Rule("layers that never ran", _has_layers, _never_called),
    # not for a compiled run: a layer whose work was fused away or elided has no kernel
    Rule(
        "layers timed at 0 ns after the overhead correction",
        lambda p: live(p) and p.compiled is None,
        _zeroed,
    ),
    # a compiled run's first call compiles: analysis/compiled.py says so instead
    Rule("cold first call", lambda p: _has_latency(p) and p.compiled is None, _cold),
    Rule("latency noise", _has_latency, _noisy),
    Rule("hook overhead", _has_overhead, _overhead),
    Rule("clean vs per-layer pass agreement", _has_root_samples, agreement_findings),
    # a Recorder's profile has no clean pass: its own forwards are the reference
    Rule(
        "layer table vs the measured forwards (no clean pass)",
        lambda p: p.meta.source == "recorder" and "" in p.samples,
        table_agreement,
    ),
    Rule("fused fast paths and code paths", lambda p: p.passes is not None, code_path_findings),
    Rule("GPU idle, copies and communication", _has_devices, _devices),
    Rule(
        "compiled view (wrapper overhead, graph breaks, recompiles, estimated shares)",
        lambda p: p.compiled is not None,
        compiled_findings,
    ),
    Rule(
        "exposed communication, data loading, launch-bound queues",
        lambda p: p.trace.breakdown is not None or p.trace.queues is not None,
        distributed_findings,
    ),
    Rule(
        f"training loop (data wait >= {100 * DATA_SHARE:.0f}% of the step; a layer's backward"
        f" > {BACKWARD_RATIO:.0f}x its forward, at the low end of the 95% CI)",
        lambda p: p.loop is not None,
        loop_findings,
    ),
    Rule(
        f"generation (the phase that takes the time; a layer >= {100 * DECODE_LAYER_SHARE:.0f}%"
        f" of a decode step, the output projection >= {100 * LM_HEAD_SHARE:.0f}%, at the low"
        f" end of the 95% CI; a decode step under {100 * LOW_BANDWIDTH:.0f}% of the"
        " bandwidth roof)",
        has_generation,
        generation_findings,
    ),
    Rule("setup (dtype)", live, _setup),
    Rule(
        f"FLOP coverage (>= {100 * RELIABLE_COVERAGE:.0f}% of the op time in counted ops)",
        has_coverage,
        coverage_findings,
    ),
    Rule(
        f"roofline (heavy layers below {100 * LOW_PEAK:.0f}% of what their intensity allows)",
        has_peak,
        roofline_findings,
    ),
    Rule(
        "activation memory (the layer saving the most for backward, and checkpointing it)",
        has_activation_memory,
        memory_findings,
    ),
)
