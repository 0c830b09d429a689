"""Findings: what the bottleneck is and what to try, from a Profile or a trace analysis.

Each rule reads numbers the profile already holds and states them in the
finding, so a reader can check it. Rules never print; renderers show them.
Thresholds are deliberately conservative: a finding should be worth reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from layerprof.analysis.distributed import distributed_findings, straggler_findings
from layerprof.analysis.finding import Finding as Finding
from layerprof.analysis.finding import Severity as Severity
from layerprof.analysis.roofline import roofline_findings
from layerprof.units import human_count, human_time

if TYPE_CHECKING:
    from layerprof.profile import LayerRow, Profile, Run
    from layerprof.sections import CrossRank, DeviceUse

_ORDER = {"high": 0, "warning": 1, "info": 2}

BOTTLENECK_SHARE = 0.25  # a layer whose self time is this share of the forward
PARENT_SELF_SHARE = 0.15  # functional work inside a container's forward
SMALL_LAYER_NS = 20_000  # layers below this total are dominated by per-call overhead
SMALL_LAYERS_SHARE = 0.30
COLD_RATIO = 5.0
NOISY_P90_RATIO = 1.3
OVERHEAD_RATIO = 1.5
GPU_UTIL_LOW = 0.5
MEMCPY_SHARE = 0.10
COMM_SHARE = 0.30
RANK_SPREAD = 0.10

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


def diagnose(profile: Profile) -> list[Finding]:
    """Findings about a profiled model, most severe first."""
    all_rows = profile.rows()
    rows = [r for r in all_rows if r.calls]
    root_total = sum(r.total_ns for r in all_rows if r.parent is None)
    out: list[Finding] = []
    if root_total > 0 and rows:
        out += _bottleneck(rows, root_total)
        out += _parent_self(rows, root_total)
        out += _small_layers(rows, root_total)
    out += _latency_findings(profile)
    out += _device_findings(profile)
    out += _setup_findings(profile)
    out += distributed_findings(profile)
    out += roofline_findings(profile)
    return sorted(out, key=lambda f: _ORDER[f.severity])


def _type_hint(row: LayerRow, has_children: bool) -> str:
    for key, hint in _HINTS.items():
        if key.lower() in row.type.lower():
            return hint
    if has_children:
        return "its own forward does the work (functional ops): run with --ops to see which"
    return "look at its input shapes and dtype; run with --ops to see its operators"


def _self_time(row: LayerRow) -> float:
    """Device self time where measured (CUDA): host time there is mostly launch cost."""
    return row.device_self_ns if row.device_self_ns is not None else row.self_ns


def _bottleneck(rows: Sequence[LayerRow], root_total: float) -> list[Finding]:
    parents = {r.parent for r in rows}
    # A model with no child layers is trivially its own bottleneck: say nothing.
    candidates = [r for r in rows if r.parent is not None or r.path in parents]
    if not candidates:
        return []
    top = max(candidates, key=_self_time)
    device = top.device_self_ns is not None
    whole = sum(r.device_total_ns or 0 for r in rows if r.parent is None) if device else root_total
    share = _self_time(top) / whole if whole > 0 else 0.0
    if share < BOTTLENECK_SHARE:
        return []
    return [
        Finding(
            "high",
            f"{top.path or top.type} ({top.type}) is the bottleneck",
            f"its {'device ' if device else ''}self time is {human_time(_self_time(top))}"
            f" per forward, {100 * share:.0f}% of the model's {human_time(whole)}"
            + _throughput(top)
            + ".",
            _type_hint(top, top.path in parents),
            top.path,
        )
    ]


def _throughput(row: LayerRow) -> str:
    """Achieved FLOP rate of a leaf, which says whether it is compute- or overhead-bound."""
    time_ns = row.device_total_ns if row.device_total_ns is not None else row.total_ns
    if not row.flops or time_ns <= 0:
        return ""
    return f"; {human_count(row.flops)}FLOPs at {row.flops / time_ns:.1f} GFLOP/s"


def _parent_self(rows: Sequence[LayerRow], root_total: float) -> list[Finding]:
    parents = {r.parent for r in rows if r.parent is not None}
    out = []
    for r in rows:
        share = r.self_ns / root_total
        if r.path in parents and PARENT_SELF_SHARE <= share < BOTTLENECK_SHARE:
            out.append(
                Finding(
                    "warning",
                    f"{r.path or r.type} spends {100 * share:.0f}% of the forward outside its child modules",
                    f"{human_time(r.self_ns)} of self time in a layer that has child modules:"
                    " functional calls (softmax, matmul, reshapes) inside its forward.",
                    "run with --ops to see the operators; fused functional ops"
                    " (scaled_dot_product_attention) or torch.compile may help",
                    r.path,
                )
            )
    return out


def _small_layers(rows: Sequence[LayerRow], root_total: float) -> list[Finding]:
    parents = {r.parent for r in rows}
    small = [r for r in rows if r.path not in parents and r.total_ns < SMALL_LAYER_NS]
    small_ns = sum(r.total_ns for r in small)
    if len(small) < 20 or small_ns / root_total < SMALL_LAYERS_SHARE:
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


def _latency_findings(profile: Profile) -> list[Finding]:
    lat = profile.latency
    out: list[Finding] = []
    if lat is None or lat.median <= 0:
        return out
    if profile.first_ns is not None and profile.first_ns > COLD_RATIO * lat.median:
        out.append(
            Finding(
                "info",
                f"the first call is {profile.first_ns / lat.median:.0f}x slower than steady state",
                f"cold call {human_time(profile.first_ns)} vs median {human_time(lat.median)}:"
                " lazy initialisation, allocator growth, kernel selection.",
                "warm the model up before serving or timing it",
            )
        )
    if lat.n >= 5 and lat.p90 > NOISY_P90_RATIO * lat.median:
        out.append(
            Finding(
                "warning",
                "latency is noisy",
                f"p90 {human_time(lat.p90)} is {lat.p90 / lat.median:.2f}x the median"
                f" {human_time(lat.median)} (std {human_time(lat.std)}, n={lat.n}).",
                "close other programs, fix --threads, raise --iters; compare medians only",
            )
        )
    o = profile.overhead
    if o and o.clean_ns and o.instrumented_ns and o.instrumented_ns > OVERHEAD_RATIO * o.clean_ns:
        out.append(
            Finding(
                "warning",
                f"instrumentation slowed the forward {o.instrumented_ns / o.clean_ns:.1f}x",
                f"{human_time(o.per_call_ns)} per module call x {o.calls_per_forward:g} calls;"
                " self times were corrected"
                + (" for it" if o.corrected else " (correction off)")
                + ", but shares of microsecond layers are less precise.",
                "trust the latency line for the whole model; use --ops for tiny layers",
            )
        )
    return out


def _setup_findings(profile: Profile) -> list[Finding]:
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
    if m.mode == "train" and m.source == "layerprof.run":
        out.append(
            Finding(
                "info",
                "the model ran in train mode",
                "dropout and batch-norm statistics updates run in train mode.",
                "drop --train to measure inference",
            )
        )
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


def _device_findings(profile: Profile) -> list[Finding]:
    """GPU idle time, copies and communication, from a trace's (or ops mode's) sections."""
    out: list[Finding] = []
    for dev in profile.devices:
        if dev.window_ns and dev.utilization < GPU_UTIL_LOW:
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
        if dev.busy_ns > 0 and copy / dev.busy_ns > MEMCPY_SHARE:
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
    kinds = {k.kind: k.total_ns for k in profile.kinds}
    total = sum(kinds.values())
    comm = kinds.get("communication", 0)
    if total > 0 and comm / total > COMM_SHARE:
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
    if hi <= lo * (1 + RANK_SPREAD):
        return []
    return [
        Finding(
            "warning",
            f"rank {cross.slowest_rank} is a straggler",
            f"median step times range from {human_time(lo)} to {human_time(hi)} across"
            f" {len(medians)} ranks.",
            "compare that rank's data, kernels and host work with the others",
        )
    ]
