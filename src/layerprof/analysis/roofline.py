"""Achieved FLOP/s, bytes moved, arithmetic intensity and the roofline, per layer.

Read from a Profile (no torch): each layer that did work and has no child
that ran (a leaf of the executed tree: a fused ``TransformerEncoderLayer`` is
one) becomes a point: counted forward FLOPs and bytes moved
(``layerprof.pivot.sections.flops``) over its time per forward - device total
where it was measured (CUDA), else host total. Against the device's peak it
is compute-bound when its intensity (FLOP per byte) is at or above the ridge
(peak FLOP/s / peak bytes/s), memory-bound below; its attainable rate is
``min(peak, intensity x bandwidth)``.

A layer whose op time is mostly in uncounted ops has a rate that is only a
lower bound: the point says so (``reliable``), and the findings name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from layerprof.analysis.finding import Finding, Severity
from layerprof.units import NS_PER_S, human_bytes, human_count, human_si, human_time

if TYPE_CHECKING:
    from layerprof.pivot.profile import LayerRow, Profile
    from layerprof.pivot.sections.flops import Peak

# below this a time gives no rate (an estimated sliver of a fused kernel in a compiled
# run can be 1 ns, which would read as thousands of % of peak)
_MIN_TIME_NS = 1_000
_HEAVY_SHARE = 0.10  # a leaf with this share of the forward gets a finding when slow
LOW_PEAK = 0.30  # below this share of the attainable rate a heavy layer is worth a look
_WARN_SHARE = 0.25  # ... and a warning, not info, from this share of the forward
RELIABLE_COVERAGE = 0.90  # of a layer's op time in counted ops
_MAX_FINDINGS = 3
_ABOVE_PEAK = 1.1  # a layer this far above a measured peak says the peak was measured low


@dataclass(frozen=True)
class RooflinePoint:
    """One layer on the roofline. ``share`` is its share of the forward's time;
    ``rate`` FLOP/s; ``intensity`` FLOP per byte; ``peak_share`` rate / peak FLOP/s;
    ``attainable_share`` rate / min(peak, intensity x bandwidth); ``bound``
    ``compute`` or ``memory`` (None without a peak)."""

    path: str
    type: str
    time_ns: float
    share: float
    flops: int
    bytes: int
    rate: float
    intensity: float | None
    peak_share: float | None
    attainable_share: float | None
    bound: str | None
    uncounted_share: float | None
    label: str | None

    @property
    def reliable(self) -> bool:
        return self.uncounted_share is None or self.uncounted_share <= 1 - RELIABLE_COVERAGE

    @property
    def name(self) -> str:
        return self.path or self.type


@dataclass(frozen=True)
class Roofline:
    """The points (by time, largest first) and the peak they are measured against."""

    peak: Peak | None
    points: tuple[RooflinePoint, ...]
    device_time: bool  # times are device (GPU) times

    @property
    def above_peak(self) -> tuple[RooflinePoint, ...]:
        """Layers faster than a *measured* peak: it was measured low (a busy machine)."""
        if self.peak is None or self.peak.source not in ("measured", "cached"):
            return ()
        return tuple(
            p for p in self.points if p.peak_share is not None and p.peak_share > _ABOVE_PEAK
        )


def roofline(profile: Profile) -> Roofline | None:
    """The roofline of a profile with counted FLOPs (None without)."""
    if profile.flops is None:
        return None
    rows = profile.rows()
    parent = {r.path: r.parent for r in rows}
    ran: set[str | None] = set()  # every ancestor of a layer that ran (not only parents:
    for r in rows:  # a ModuleList between a TransformerEncoder and its layers never runs)
        up = r.parent if r.calls else None
        while up is not None and up not in ran:
            ran.add(up)
            up = parent.get(up)
    device = any(r.device_total_ns is not None for r in rows)
    whole = sum(_time(r) for r in rows if r.parent is None)
    peak = profile.flops.peak
    points = [
        _point(r, whole, peak)
        for r in rows
        if r.calls and r.path not in ran and r.flop_detail is not None
        and _time(r) >= _MIN_TIME_NS and (r.flops or r.flop_detail.bytes)
    ]  # fmt: skip
    points.sort(key=lambda p: -p.time_ns)
    return Roofline(peak, tuple(points), device)


def _time(row: LayerRow) -> float:
    return row.device_total_ns if row.device_total_ns is not None else row.total_ns


def _point(row: LayerRow, whole: float, peak: Peak | None) -> RooflinePoint:
    detail = row.flop_detail
    assert detail is not None
    time = _time(row)
    flops = row.flops or 0
    rate = flops / time * NS_PER_S
    intensity = flops / detail.bytes if detail.bytes else None
    peak_share = attainable_share = None
    bound = None
    if peak is not None and peak.flops_per_s:
        peak_share = rate / peak.flops_per_s
        attainable_share = peak_share
        measurable = flops > 0 or not detail.uncounted_ns  # 0 FLOPs for a reason, not unknown
        if intensity is not None and peak.bytes_per_s and peak.ridge is not None and measurable:
            bound = "compute" if intensity >= peak.ridge else "memory"
            attainable = min(peak.flops_per_s, intensity * peak.bytes_per_s)
            attainable_share = rate / attainable if attainable > 0 else None
    return RooflinePoint(
        path=row.path,
        type=row.type,
        time_ns=time,
        share=time / whole if whole > 0 else 0.0,
        flops=flops,
        bytes=detail.bytes,
        rate=rate,
        intensity=intensity,
        peak_share=peak_share,
        attainable_share=attainable_share,
        bound=bound,
        uncounted_share=detail.uncounted_share,
        label=detail.label,
    )


# ---- findings ------------------------------------------------------------------------


def has_peak(profile: Profile) -> bool:
    """Whether the roofline rule has what it reads: counted FLOPs and a peak FLOP/s."""
    flops = profile.flops
    return flops is not None and flops.peak is not None and bool(flops.peak.flops_per_s)


def has_coverage(profile: Profile) -> bool:
    """Whether the coverage rule has what it reads: op time split by counted ops."""
    return profile.flops is not None and profile.flops.coverage is not None


def roofline_findings(profile: Profile) -> list[Finding]:
    """Heavy layers far below their roofline, and a measured peak that layers beat."""
    out: list[Finding] = []
    line = roofline(profile)
    if line is None or line.peak is None or not line.peak.flops_per_s:
        return out
    slow = [
        p for p in line.points
        if p.share >= _HEAVY_SHARE and p.flops > 0 and p.attainable_share is not None
        and p.attainable_share < LOW_PEAK
    ]  # fmt: skip
    out += [_slow_layer(p, line, profile.meta.device) for p in slow[:_MAX_FINDINGS]]
    if line.above_peak:
        out.append(_peak_measured_low(line))
    return out


def _peak_measured_low(line: Roofline) -> Finding:
    fastest = max(line.above_peak, key=lambda p: p.rate)
    assert line.peak is not None and fastest.peak_share is not None
    return Finding(
        "warning",
        f"the measured peak is below what {fastest.name} reached",
        f"{fastest.name} ran at {human_si(fastest.rate, 'FLOP/s')},"
        f" {100 * fastest.peak_share:.0f}% of the peak {_peak_text(line.peak)}: the peak was"
        " measured while the machine was busy, so every % of peak here is too high.",
        "delete peaks.json in layerprof's cache directory ($LAYERPROF_CACHE_DIR or"
        " ~/.cache/layerprof) to measure again on a quiet machine, or give --peak FLOPS,BYTES",
        fastest.path,
    )


def _slow_layer(p: RooflinePoint, line: Roofline, device: str) -> Finding:
    peak = line.peak
    assert peak is not None and p.peak_share is not None
    severity: Severity = "warning" if p.share >= _WARN_SHARE else "info"
    where = f"{_pct(p.peak_share)} of peak"
    intensity = intensity_text(p.intensity)
    if p.bound == "memory":
        title = f"{p.name} runs at {where}, memory-bound at intensity {intensity} FLOP/B"
        hint = "raise the batch size, or fuse it with its neighbours (torch.compile); a smaller dtype moves fewer bytes"
    elif p.bound == "compute":
        title = f"{p.name} runs at {where}, compute-bound at intensity {intensity} FLOP/B"
        hint = (
            "bf16 autocast or TF32 (torch.set_float32_matmul_precision('high')) on tensor cores"
            if device.startswith("cuda")
            else "more threads (--threads), a larger batch, or bf16 on a CPU with AMX/AVX-512"
        )
    else:
        title = f"{p.name} runs at {where}"
        hint = "give --peak FLOPS,BYTES to place it against the memory roofline too"
    allows = (
        f", {_pct(p.attainable_share)} of what its intensity allows"
        if p.bound == "memory" and p.attainable_share is not None
        else ""
    )
    detail = (
        f"{human_count(p.flops)} FLOPs in {human_time(p.time_ns)} per forward"
        f" ({100 * p.share:.0f}% of it) is {human_si(p.rate, 'FLOP/s')}{allows}; it moves"
        f" {human_bytes(p.bytes)}. Peak {_peak_text(peak)}."
    )
    if not p.reliable and p.uncounted_share is not None:
        detail += (
            f" {100 * p.uncounted_share:.0f}% of its op time is in uncounted ops:"
            " its rate is a lower bound."
        )
    return Finding(severity, title, detail, hint, p.path)


def _pct(share: float | None) -> str:
    if share is None:
        return "?"
    if share < 0.001:
        return "<0.1%"
    return f"{100 * share:.1f}%" if share < 0.1 else f"{100 * share:.0f}%"


def intensity_text(value: float | None) -> str:
    """FLOP per byte in a few significant digits (0.0125, 0.8, 23.2, 100)."""
    if value is None:
        return "?"
    if value >= 10:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 1 else f"{value:.2g}"


def _peak_text(peak: Peak) -> str:
    parts = [human_si(peak.flops_per_s or 0, "FLOP/s")]
    if peak.bytes_per_s:
        parts.append(human_si(peak.bytes_per_s, "B/s"))
    ridge = f", ridge {peak.ridge:.1f} FLOP/B" if peak.ridge is not None else ""
    return f"{' and '.join(parts)}{ridge} ({peak.source}: {peak.detail})"


def coverage_findings(profile: Profile) -> list[Finding]:
    """A warning when FLOPs cover too little of the op time for the rates to be read."""
    summary = profile.flops
    if summary is None or summary.coverage is None or summary.coverage >= RELIABLE_COVERAGE:
        return []
    ops = "; ".join(
        f"{op.name} {human_time(op.time_ns)} ({op.reason})" for op in summary.uncounted_ops[:3]
    )
    return [
        Finding(
            "warning" if summary.coverage < 0.5 else "info",
            f"FLOPs cover {100 * summary.coverage:.0f}% of the op time",
            f"ops without a usable formula took {human_time(summary.uncounted_ns)} of the"
            f" counting forward's {human_time(summary.counted_ns + summary.uncounted_ns)}:"
            f" {ops}.",
            "the FLOP/s of layers running them are lower bounds; their FLOPs are not 0, only"
            " not counted",
        )
    ]
