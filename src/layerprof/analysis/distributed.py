"""Findings from the distributed sections: exposed communication, data loading,
launch-bound queues (per rank), and the straggler across ranks.

Each finding states the numbers it was judged on; thresholds are conservative.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprof.analysis.finding import Finding
from layerprof.units import human_time

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile, Run
    from layerprof.pivot.sections.distributed import Breakdown, RankLateness, Stragglers

_EXPOSED_SHARE = 0.10  # exposed communication, of the steps' wall time
_DATALOADER_SHARE = 0.10
_SHORT_KERNEL_SHARE = 0.50  # device ops shorter than their launch call
_MIN_SHORT_KERNELS = 100
_STRAGGLER_LATE_NS = 100_000  # a straggler's median lateness worth a finding
_STRAGGLER_HIGH = 0.10  # its lateness per step, of the median step: high severity


def distributed_findings(profile: Profile) -> list[Finding]:
    """Exposed communication, data loading and launch-bound queues of one rank."""
    out: list[Finding] = []
    if profile.trace.breakdown is not None:
        out += _exposed(profile, profile.trace.breakdown)
        out += _dataloader(profile.trace.breakdown)
    q = profile.trace.queues
    if q is not None and q.kernels >= _MIN_SHORT_KERNELS:
        share = q.short_kernels / q.kernels
        if share >= _SHORT_KERNEL_SHARE:
            out.append(
                Finding(
                    "warning",
                    f"{100 * share:.0f}% of device ops run shorter than their launch call",
                    f"{q.short_kernels} of {q.kernels} kernels/copies"
                    f" ({human_time(q.short_kernel_ns)} of device time) finish faster than the"
                    " host launches them: the run is launch-bound."
                    + (
                        f" Each graph launch counts once, against its replayed ops' summed"
                        f" time ({q.graph_launches} launches, {q.graph_ops:,} ops)."
                        if q.graph_launches
                        else ""
                    ),
                    "fuse small ops (torch.compile), capture steps in CUDA graphs,"
                    " or give each kernel more work (larger batch)",
                )
            )
    return out


def _exposed(profile: Profile, b: Breakdown) -> list[Finding]:
    out = []
    for device in sorted({s.device for s in b.steps}, key=lambda d: -1 if d is None else d):
        t = b.totals(device)
        comm = t["communication"] + t["overlap"]
        if t["wall"] <= 0 or t["communication"] / t["wall"] < _EXPOSED_SHARE:
            continue
        where = "the host" if device is None else f"device {device}"
        c = profile.trace.communication
        pct = (
            f"; {c.overlap_pct:.0f}% of all communication overlaps compute"
            if c and c.overlap_pct is not None
            else ""
        )
        out.append(
            Finding(
                "warning",
                f"exposed communication is {100 * t['communication'] / t['wall']:.0f}% of step"
                f" time on {where}",
                f"collectives run {human_time(comm)} over {human_time(t['wall'])} of steps, of"
                f" which {human_time(t['communication'])} with no compute beside them{pct}.",
                "overlap communication with compute (DDP bucket_cap_mb, FSDP prefetching,"
                " async collectives), or check whether a straggler rank keeps the others waiting",
            )
        )
    return out


def _dataloader(b: Breakdown) -> list[Finding]:
    wall = sum(s.wall_ns for s in b.steps)
    loading = sum(s.dataloader_ns for s in b.steps)
    if wall <= 0 or loading / wall < _DATALOADER_SHARE:
        return []
    return [
        Finding(
            "warning",
            f"data loading takes {100 * loading / wall:.0f}% of step time",
            f"{human_time(loading)} of {human_time(wall)} in data-loading spans with the device"
            " idle.",
            "more DataLoader workers, pin_memory=True, prefetching, or lighter transforms",
        )
    ]


def straggler_findings(run: Run) -> list[Finding]:
    """The rank that arrives last at collectives, with how late and what it did before."""
    s = run.stragglers
    if s is None or s.straggler is None:
        return []
    line = next((r for r in s.ranks if r.rank == s.straggler), None)
    if line is None or line.median_late_ns is None or line.median_late_ns < _STRAGGLER_LATE_NS:
        return []
    rank = next((p for p in run.ranks if p.rank == line.rank), None)
    steps = (
        len(rank.trace.steps.complete) if rank is not None and rank.trace.steps is not None else 0
    )
    return [_straggler(s, line, max(steps, 1))]


def _straggler(s: Stragglers, line: RankLateness, steps: int) -> Finding:
    before = ""
    if line.prior_compute_ns is not None:
        before = f" Before those collectives it ran {human_time(line.prior_compute_ns)} of compute"
        before += f" (median; most often {line.prior_top})." if line.prior_top else " (median)."
    spread = ""
    if s.step_spread_ns is not None:
        spread = f" Median step times differ by {human_time(s.step_spread_ns)} across ranks."
    per_step = line.late_ns / steps
    high = line.median_step_ns is not None and per_step > _STRAGGLER_HIGH * line.median_step_ns
    return Finding(
        "high" if high else "warning",
        f"rank {line.rank} is a straggler: last at {line.last} of {s.matched} collectives",
        f"it arrives a median {human_time(line.median_late_ns)} after the first rank"
        f" ({human_time(line.late_ns)} in all); the others wait for it.{before}{spread}",
        f"compare rank {line.rank}'s work before its collectives with the other ranks':"
        " uneven batches or shards, a slower device or host, extra work on that rank",
    )
