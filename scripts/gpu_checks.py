"""The CUDA truth check's measurements (issue 37): known costs on a real GPU, checked
against layerprof's numbers. Run by ``scripts/gpu-check.sh``; by hand:

    PYTHONPATH=src python scripts/gpu_checks.py --out gpu-report [--only known_costs,compiled]

Each check is a function that returns a ``Check`` (pass, fail or skip, a one-line
reason, the figures it measured) within its own time budget (``BUDGETS``; one that
runs past it is a ``fail`` saying so). One that raises is a ``fail`` naming the
error, so a broken check never hides the others. Without CUDA every check is
``skip`` with its reason, the report is still written and the exit code is 0 (the
dry run that keeps this script from rotting on CPU-only machines). Writes
``gpu-report.json`` and ``gpu-report.txt`` into ``--out`` after every check (a run
killed from outside leaves what it had); exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from unittest.mock import patch

#: Tolerance of a measured device time against a known one: 3 % plus 5 µs.
REL_TOL, ABS_TOL_NS = 0.03, 5_000
#: Tolerance of a measured allocator rise against torch's own: 5 % plus 64 KiB.
MEM_REL_TOL, MEM_ABS_TOL = 0.05, 64 << 10
#: Known sleep durations of the checked known-cost layers (µs).
SLEEPS_US = (200, 400, 800)
#: A first, unchecked sleep that puts the GPU ahead of the host, so the checked
#: layers' event spans hold their kernels only (no launch gap of an idle GPU).
LEAD_US = 1000
#: The sleep calibration's points must lie this close to its line (relative), past
#: an allowance for CUDA events' own jitter (a rerun on an H200 read its 30 us point
#: 0.6 us off: 2.006 %, while every layer there was within 1 %).
LINEAR_TOL = 0.02
LINEAR_ALLOWANCE_NS = 1_000.0
#: Latency of layerprof's clean pass against a CUDA-event-timed bare loop.
LATENCY_TOL = 0.10
#: Seconds each check may take (SIGALRM; a check past it fails). Their sum, plus
#: start-up, is what gpu-check.sh gives this script.
BUDGETS: dict[str, float] = {
    "environment": 10,
    "known_costs": 50,
    "no_sync_per_layer": 40,
    "host_vs_device": 40,
    "training_loop": 30,
    "memory": 30,
    "analyze": 25,
    "roofline": 35,
    "graph_replay": 20,
    "compiled": 100,
}
SYNC_NAMES = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass
class Check:
    name: str
    status: str  # pass | fail | skip
    reason: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    budget_s: float = 0.0


class CheckTimeout(Exception):
    """A check ran past its time budget."""


# ---- the pure pieces (unit-tested without a GPU) -----------------------------------


def within(measured_ns: float, known_ns: float) -> bool:
    """The check's tolerance rule: ``|measured - known| <= 3 % of known + 5 µs``."""
    return abs(measured_ns - known_ns) <= REL_TOL * known_ns + ABS_TOL_NS


def bytes_close(measured: float, reference: float) -> bool:
    """Memory's rule: ``|measured - reference| <= 5 % of reference + 64 KiB``."""
    return abs(measured - reference) <= MEM_REL_TOL * reference + MEM_ABS_TOL


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``y = a x + b`` (the sleep calibration: cycles -> ns)."""
    n = len(xs)
    if n < 2 or len(ys) != n:
        raise ValueError("a line needs two points (and one y per x)")
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        raise ValueError("the points have one x")
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
    return a, my - a * mx


def worst_residual(xs: Sequence[float], ys: Sequence[float], a: float, b: float) -> float:
    """The largest ``(|a x + b - y| - LINEAR_ALLOWANCE_NS) / y`` over the points (how
    straight the line is, past the events' jitter), 0 when every point is within it."""
    return max(
        max(abs(a * x + b - y) - LINEAR_ALLOWANCE_NS, 0.0) / y
        for x, y in zip(xs, ys, strict=True)
        if y > 0
    )


def count_syncs(trace: dict[str, Any]) -> int:
    """Host-side synchronizes in a Chrome trace torch.profiler wrote."""
    return sum(
        1
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "X" and any(str(e.get("name", "")).startswith(n) for n in SYNC_NAMES)
    )


def device_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Kernels, memcpys and memsets of a torch.profiler trace, in start order."""
    evs = [
        e
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS and "dur" in e
    ]
    return sorted(evs, key=lambda e: float(e["ts"]))


def kernel_durations_ns(trace: dict[str, Any], name_part: str) -> list[float]:
    """Durations (ns) of the kernels whose name holds ``name_part``, in start order."""
    return [
        float(e["dur"]) * 1000
        for e in device_events(trace)
        if e.get("cat") == "kernel" and name_part in str(e.get("name", ""))
    ]


def sum_ns(trace: dict[str, Any], cat: str) -> float:
    """Summed durations (ns) of one category of device event."""
    return sum(float(e["dur"]) * 1000 for e in device_events(trace) if e.get("cat") == cat)


def per_position_medians(values: Sequence[float], period: int) -> list[float]:
    """``values`` repeat a cycle of ``period`` (one per layer, forward after forward):
    the median of each position."""
    if period < 1 or not values or len(values) % period:
        raise ValueError(f"{len(values)} values do not make whole cycles of {period}")
    return [statistics.median(values[i::period]) for i in range(period)]


def busy_union_ns(
    trace: dict[str, Any], lo_us: float = float("-inf"), hi_us: float = float("inf")
) -> float:
    """GPU busy time inside ``[lo, hi)`` (µs in the trace) recomputed from the raw
    events: the union of kernel, memcpy and memset intervals."""
    spans = sorted(
        (max(float(e["ts"]), lo_us), min(float(e["ts"]) + float(e["dur"]), hi_us))
        for e in device_events(trace)
    )
    total, end = 0.0, float("-inf")
    for a, b in spans:
        if b <= a:
            continue
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total * 1000


def leaf_paths(rows: Sequence[Any]) -> list[str]:
    """Paths of the rows no other row names as its parent (the root excluded)."""
    parents = {r.parent for r in rows}
    return [r.path for r in rows if r.path and r.path not in parents]


def device_host_ratio(rows: Sequence[Any]) -> float | None:
    """Leaf layers' summed device self time over their summed host self time (None
    without device times). A layer's device time is the span between CUDA events
    recorded at its start and end, so it holds the GPU's idle wait too: about equal
    to the host time when the host is the bottleneck, far above it when the GPU is."""
    leaves = set(leaf_paths(rows))
    picked = [r for r in rows if r.path in leaves]
    if not picked or any(r.device_self_ns is None for r in picked):
        return None
    host = sum(r.self_ns for r in picked)
    return sum(r.device_self_ns for r in picked) / host if host > 0 else None


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Raise ``CheckTimeout`` in the main thread once ``seconds`` have passed (where
    SIGALRM exists; a call stuck inside C code is stopped only when it returns: the
    outer ``timeout`` of gpu-check.sh bounds that)."""
    if (
        seconds <= 0
        or not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CheckTimeout(f"ran past its budget of {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---- helpers that need torch (and, when called, CUDA) ----------------------------------


def _torch() -> Any:
    import torch

    return torch


def _no_cuda(name: str) -> Check | None:
    if _torch().cuda.is_available():
        return None
    return Check(name, "skip", "no CUDA device")


def _trace_of(prof: Any, keep: Path | None = None) -> dict[str, Any]:
    """A finished torch.profiler's Chrome trace, read back (gzipped to ``keep`` when
    given: the report keeps the small traces, not the large ones)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        text = path.read_bytes()
    if keep is not None:
        keep.write_bytes(gzip.compress(text))
    trace: dict[str, Any] = json.loads(text)
    return trace


def _acts() -> list[Any]:
    torch = _torch()
    return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]


def _event_ns(fn: Callable[[], Any], reps: int) -> list[float]:
    """CUDA-event time (ns) of ``fn`` on the current stream, ``reps`` times."""
    torch = _torch()
    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) * 1e6)
    return out


def calibrate_sleep() -> tuple[float, float, float]:
    """``torch.cuda._sleep(cycles)`` cycles -> ns on this card, by CUDA events over a
    few sizes (median of nine each, after a warm-up): slope, offset, worst residual."""
    torch = _torch()
    _event_ns(lambda: torch.cuda._sleep(200_000), 3)  # load the kernel, wake the clocks
    xs = [50_000.0, 200_000.0, 800_000.0, 1_600_000.0]
    ys = [statistics.median(_event_ns(partial(torch.cuda._sleep, int(x)), 9)) for x in xs]
    a, b = fit_line(xs, ys)
    return a, b, worst_residual(xs, ys, a, b)


def _kernel_ns_per_call(fn: Callable[[], Any], calls: int) -> float:
    """torch.profiler's summed device time (kernels, memcpys, memsets) of one call."""
    torch = _torch()
    with torch.inference_mode():
        fn()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=_acts()) as p:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
    evs = device_events(_trace_of(p))
    return sum(float(e["dur"]) * 1000 for e in evs) / calls


def _known_cost_model(ns_per_cycle: float) -> Any:
    torch = _torch()
    from torch import nn

    class Sleep(nn.Module):
        def __init__(self, us: int) -> None:
            super().__init__()
            self.us, self.cycles = us, max(round(us * 1000 / ns_per_cycle), 1)

        def forward(self, x: Any) -> Any:
            torch.cuda._sleep(self.cycles)
            return x

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lead = Sleep(LEAD_US)
            self.sleeps = nn.ModuleList(Sleep(us) for us in SLEEPS_US)
            self.conv = nn.Conv2d(64, 64, 3, padding=1)
            self.fc = nn.Linear(64 * 64, 1024)

        def forward(self, x: Any) -> Any:
            x = self.lead(x)
            for s in self.sleeps:
                x = s(x)
            return self.fc(self.conv(x).flatten(2))

    return Net().cuda().eval()


# ---- the checks (each needs CUDA) -----------------------------------------------------


def check_environment(out: Path) -> Check:
    torch = _torch()
    figures: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if not torch.cuda.is_available():
        return Check("environment", "skip", "no CUDA device", figures)
    figures.update(
        device=torch.cuda.get_device_name(0),
        capability=".".join(map(str, torch.cuda.get_device_capability(0))),
        cuda_runtime=torch.version.cuda,
        memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1),
    )
    return Check("environment", "pass", figures["device"], figures)


def check_known_costs(out: Path) -> Check:
    name = "known costs per layer"
    if (skip := _no_cuda(name)) is not None:
        return skip
    torch = _torch()
    import layerprof

    a, b, worst = calibrate_sleep()
    figures: dict[str, Any] = {"ns_per_cycle": a, "offset_ns": b, "calibration_residual": worst}
    bad = []
    if worst > LINEAR_TOL:
        bad.append(f"sleep is not linear in cycles here (worst point {100 * worst:.1f} % off)")
    model = _known_cost_model(a)
    x = torch.randn(32, 64, 64, 64, device="cuda")
    # torch.profiler's own kernel times for the same layers: the sleeps in one model
    # run (lead + checked, per forward), the conv and the fc each called alone
    runs = 10
    with torch.inference_mode():
        model(x)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=_acts()) as p:
            for _ in range(runs):
                model(x)
            torch.cuda.synchronize()
        y = model.conv(x).flatten(2)
    trace = _trace_of(p, out / "known-costs.trace.json.gz")
    spins = kernel_durations_ns(trace, "spin_kernel")
    if len(spins) != runs * (1 + len(SLEEPS_US)):
        names = sorted({str(e.get("name")) for e in device_events(trace)})[:6]
        reason = f"{len(spins)} spin_kernel launches for {runs} forwards; kernels seen: {names}"
        return Check(name, "fail", reason, figures)
    per = per_position_medians(spins, 1 + len(SLEEPS_US))
    ref = {f"sleeps.{i}": per[i + 1] for i in range(len(SLEEPS_US))}
    ref["conv"] = _kernel_ns_per_call(lambda: model.conv(x), runs)
    ref["fc"] = _kernel_ns_per_call(lambda: model.fc(y), runs)

    prof = layerprof.profile(model, x, device="cuda", warmup=3, iters=20)
    rows = {r.path: r for r in prof.rows()}
    known = {f"sleeps.{i}": us * 1000.0 for i, us in enumerate(SLEEPS_US)}
    for path, torch_ns in ref.items():
        got = rows[path].device_self_ns
        figures[path] = {"layerprof_us": None if got is None else got / 1e3,
                         "torch_profiler_us": torch_ns / 1e3,
                         "known_us": known[path] / 1e3 if path in known else None}  # fmt: skip
        if got is None:
            bad.append(f"{path}: no device time")
            continue
        if path in known and not within(got, known[path]):
            bad.append(f"{path}: {got / 1e3:.1f} us, known {known[path] / 1e3:.0f} us")
        if not within(got, torch_ns):
            bad.append(f"{path}: {got / 1e3:.1f} us, torch.profiler {torch_ns / 1e3:.1f} us")

    with torch.inference_mode():
        _event_ns(lambda: model(x), 3)
        bare = statistics.median(_event_ns(lambda: model(x), 20))
    latency = prof.latency
    if latency is None:
        bad.append("no latency")
    else:
        figures.update(latency_ms=latency.median / 1e6, bare_event_ms=bare / 1e6,
                       latency_ratio=latency.median / bare)  # fmt: skip
        if abs(latency.median - bare) > LATENCY_TOL * bare:
            bad.append(f"latency {latency.median / 1e6:.3f} ms vs bare {bare / 1e6:.3f} ms")
    if bad:
        return Check(name, "fail", "; ".join(bad), figures)
    return Check(
        name,
        "pass",
        "sleeps within 3 % + 5 us of known and of torch.profiler, conv/fc of torch.profiler;"
        " latency within 10 % of a bare loop",
        figures,
    )


def _syncs_around_profile(layers: int, iters: int) -> int:
    torch = _torch()
    from torch import nn

    import layerprof

    model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(layers)]).cuda().eval()
    x = torch.randn(32, 256, device="cuda")
    with torch.profiler.profile(activities=_acts()) as p:
        layerprof.profile(model, x, device="cuda", warmup=2, iters=iters)
    return count_syncs(_trace_of(p))


def check_no_sync_per_layer(out: Path) -> Check:
    name = "no synchronize per layer"
    if (skip := _no_cuda(name)) is not None:
        return skip
    iters, few, many = 10, 16, 64
    s_few = _syncs_around_profile(few, iters)
    s_many = _syncs_around_profile(many, iters)
    figures = {f"syncs_{few}_layers": s_few, f"syncs_{many}_layers": s_many,
               "timed_forwards": 2 * (2 + iters)}  # fmt: skip
    # one synchronize per layer and forward would add (many - few) per forward
    grew = s_many - s_few
    ok = grew < many - few and s_many < many * iters
    reason = f"{s_many} synchronizes with {many} layers, {s_few} with {few} ({grew:+d})"
    return Check(name, "pass" if ok else "fail", reason, figures)


def check_host_vs_device(out: Path) -> Check:
    name = "host vs device"
    if (skip := _no_cuda(name)) is not None:
        return skip
    torch = _torch()
    from torch import nn

    import layerprof

    tiny = nn.Sequential(*[nn.Linear(4, 4) for _ in range(100)]).cuda().eval()
    big = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)]).cuda().eval()
    p_tiny = layerprof.profile(tiny, torch.randn(1, 4, device="cuda"), device="cuda",
                               warmup=3, iters=20)  # fmt: skip
    p_big = layerprof.profile(big, torch.randn(4096, 4096, device="cuda"), device="cuda",
                              warmup=2, iters=5)  # fmt: skip
    r_tiny, r_big = device_host_ratio(p_tiny.rows()), device_host_ratio(p_big.rows())
    figures = {"host_bound_device_over_host": r_tiny, "device_bound_device_over_host": r_big}
    if r_tiny is None or r_big is None:
        return Check(name, "fail", "no device times", figures)
    ok = r_tiny <= 3 and r_big >= 10
    reason = (
        f"leaf device/host self: {r_tiny:.2f} host-bound (<= 3), {r_big:.1f} device-bound (>= 10)"
    )
    return Check(name, "pass" if ok else "fail", reason, figures)


def check_training_loop(out: Path) -> Check:
    name = "backward and step anatomy (AMP bf16)"
    if (skip := _no_cuda(name)) is not None:
        return skip
    torch = _torch()
    from torch import nn

    import layerprof

    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 512, device="cuda")
    with layerprof.Recorder(model, backward=True) as rec:
        for _ in range(6):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).float().square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            rec.step()
    prof = rec.profile()
    if prof.loop is None:
        return Check(name, "fail", "no training loop section")
    steps = prof.loop.steps
    unequal = [s.index for s in steps if sum(ns for _, ns in s.parts()) != s.wall_ns]
    odd = [s.index for s in steps if (s.forwards, s.backwards) != (1, 1)]
    rows = {r.path: r for r in prof.rows()}
    backward = {p: rows[p].backward_total_ns for p in ("0", "1", "2")}
    figures = {"steps": len(steps), "backward_ms": prof.loop.summary("backward").median / 1e6,
               "layer_backward_us": {p: None if v is None else v / 1e3
                                     for p, v in backward.items()}}  # fmt: skip
    bad = []
    if not steps:
        bad.append("no steps")
    if unequal:
        bad.append(f"parts do not add up in steps {unequal}")
    if odd:
        bad.append(f"steps {odd} did not hold one forward and one backward")
    if not all(backward.values()):
        bad.append(f"layers without backward time: {[p for p, v in backward.items() if not v]}")
    if bad:
        return Check(name, "fail", "; ".join(bad), figures)
    return Check(name, "pass", "parts add up, every layer has a backward time", figures)


def _rise(fn: Callable[[], Any]) -> int:
    """How far torch.cuda.max_memory_allocated rose above the level before ``fn``."""
    torch = _torch()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    kept = fn()
    torch.cuda.synchronize()
    rise = int(torch.cuda.max_memory_allocated() - base)
    del kept
    return rise


def check_memory(out: Path) -> Check:
    name = "memory per layer"
    if (skip := _no_cuda(name)) is not None:
        return skip
    torch = _torch()
    from torch import nn

    import layerprof

    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
    x = torch.randn(256, 1024, device="cuda")
    bad = []
    # saved for backward: Linear saves its input; ReLU its output (the second Linear's
    # input: one storage, counted once, for the innermost layer that saved it first)
    trained = layerprof.profile(model, x, device="cuda", backward=True, warmup=1, iters=3)
    section = trained.activation_memory
    own = {r.path: r.activations_self for r in section.rows} if section else {}
    expected = {"0": 256 * 1024 * 4, "1": 256 * 4096 * 4, "2": 0}
    if section is None:
        bad.append("no activation memory section")
    elif any(own.get(k) != v for k, v in expected.items()):
        bad.append(f"saved bytes {own} != analytic {expected}")
    elif not section.peaks:
        bad.append("no allocator peaks per phase")
    # peak per layer (inference) against max_memory_allocated around the same calls
    plain = layerprof.profile(model.eval(), x, device="cuda", warmup=2, iters=3)
    rows = {r.path: r for r in plain.rows()}
    with torch.inference_mode():
        for _ in range(2):
            model(x)
        ref = {"0": _rise(lambda: model[0](x)), "": _rise(lambda: model(x))}
    analytic_out = {"0": 256 * 4096 * 4, "": 256 * 4096 * 4 * 2}
    peaks = {p: rows[p].peak_bytes for p in ref}
    for p, got in peaks.items():
        if got is None:
            bad.append(f"layer {p!r}: no peak_bytes")
        elif not bytes_close(got, ref[p]) or got < analytic_out[p]:
            bad.append(
                f"layer {p!r}: peak {got} B, torch {ref[p]} B, analytic >= {analytic_out[p]}"
            )
    figures = {"activations_self": own, "analytic": expected, "peak_bytes": peaks,
               "max_memory_allocated_rise": ref,
               "phase_peaks": [(s.phase, s.rise_bytes) for s in section.peaks] if section else []}  # fmt: skip
    if bad:
        return Check(name, "fail", "; ".join(bad), figures)
    return Check(
        name, "pass", "saved bytes = analytic; peaks within 5 % + 64 KiB of torch's", figures
    )


def check_compiled(out: Path) -> Check:
    name = "--compile on CUDA"
    if (skip := _no_cuda(name)) is not None:
        return skip
    torch = _torch()
    from torch import nn

    import layerprof
    from layerprof.capture.compiled import gate
    from layerprof.errors import UsageError

    model = nn.Sequential(nn.LayerNorm(512), nn.Linear(512, 2048), nn.GELU(),
                          nn.Linear(2048, 512)).cuda().eval()  # fmt: skip
    # A torch older than the verified one (the GPU image's 2.11) is refused by the gate:
    # the check then runs with the version test lifted, to learn whether it would hold,
    # and says "skip" (its result is not a verdict on a supported path).
    try:
        gate.check_compile_support()
        unverified = ""
    except UsageError as e:
        if gate.missing_internals():
            return Check(name, "skip", str(e))
        unverified = f"{e}; run with the version test lifted: "
    with patch.object(gate, "_MIN_TORCH", (0, 0)) if unverified else nullcontext():
        prof = layerprof.profile(model, torch.randn(64, 512, device="cuda"), device="cuda",
                                 compile=True, warmup=2, iters=10)  # fmt: skip
    c = prof.compiled
    if c is None:
        return Check(name, "fail", "no compiled section")
    share = c.coverage.attributed_ns / c.coverage.region_ns if c.coverage.region_ns else 0.0
    notes = [n.text for n in prof.notes if n.kind == "recompile"]
    figures = {"attributed_share": share, "recompiles": [r.reason for r in c.recompiles],
               "recompile_notes": notes, "breaks": len(c.breaks),
               "device_time": c.device_time, "compile_s": c.compile_ns / 1e9}  # fmt: skip
    ok = share >= 0.9 and not c.recompiles and not notes and c.device_time
    reason = (
        f"{100 * share:.1f} % of compiled time on layers (>= 90 %), {len(c.recompiles)} recompiles"
    )
    if unverified:
        return Check(name, "skip", unverified + ("holds: " if ok else "FAILS: ") + reason, figures)
    return Check(name, "pass" if ok else "fail", reason, figures)


def check_analyze(out: Path) -> Check:
    name = "analyze of a CUDA trace"
    if (skip := _no_cuda(name)) is not None:
        return skip
    torch = _torch()
    import layerprof

    a = torch.randn(2048, 2048, device="cuda")
    host = torch.randn(1 << 22).pin_memory()
    sched = torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(activities=_acts(), schedule=sched) as p:
        for _ in range(4):
            with torch.profiler.record_function("step"):
                (a @ a).sum()
                host.to("cuda", non_blocking=True)
                torch.cuda.synchronize()
            p.step()
    path = out / "cuda-trace.json.gz"
    raw = _trace_of(p, path)
    prof = layerprof.analyze(str(path)).rank()
    dev = prof.devices[0] if prof.devices else None
    if dev is None:
        return Check(name, "fail", "no device in the analysis")
    steps = [e for e in raw["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    lo = min(float(e["ts"]) for e in steps)
    hi = max(float(e["ts"]) + float(e["dur"]) for e in steps)
    raw_kernels = [e for e in device_events(raw) if e.get("cat") == "kernel"]
    pairs = {
        "busy": (dev.busy_ns, busy_union_ns(raw)),
        "busy_in_steps": (dev.busy_in_window_ns, busy_union_ns(raw, lo, hi)),
        "kernel": (dev.kernel_ns, sum_ns(raw, "kernel")),
        "memcpy": (dev.memcpy_ns, sum_ns(raw, "gpu_memcpy")),
        "kernel_rows": (sum(k.total_ns for k in prof.kernels), sum_ns(raw, "kernel")),
    }
    figures: dict[str, Any] = {k: {"layerprof_ns": v[0], "raw_ns": v[1]} for k, v in pairs.items()}
    figures.update(kernel_calls=sum(k.calls for k in prof.kernels), raw_kernels=len(raw_kernels),
                   memcpy_rows=[m.kind for m in prof.memcpy], idle_ns=dev.idle_ns)  # fmt: skip
    bad = [k for k, (got, want) in pairs.items() if not within(got, want)]
    if sum(k.calls for k in prof.kernels) != len(raw_kernels):
        bad.append("kernel count")
    if not prof.memcpy or not raw_kernels:
        bad.append("no memcpy or no kernels")
    if bad:
        return Check(name, "fail", f"differs from the raw JSON: {', '.join(bad)}", figures)
    return Check(name, "pass", "busy, kernel and memcpy times match the raw JSON", figures)


#: A replay read through its capture (issue 44, item 5): the share of the replay's
#: kernel time on layers, and each heavy leaf layer's device time against eager's.
GRAPH_SHARE, GRAPH_LAYER_TOL = 0.95, 0.10
#: Leaf layers compared: those holding at least this share of the eager device time
#: (a 3 us norm's few-% jitter says nothing about the attribution).
GRAPH_HEAVY = 0.02
GRAPH_REPLAYS = 5


def _tiny_decoder() -> Any:
    torch = _torch()
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.out = nn.Linear(d, d)
            self.up = nn.Linear(d, 4 * d)
            self.act = nn.GELU()
            self.down = nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
            att = torch.softmax(q @ k.transpose(-1, -2) / 32.0, dim=-1) @ v
            x = x + self.out(att)
            return x + self.down(self.act(self.up(x)))

    class Decoder(nn.Module):
        def __init__(self, d: int = 1024, layers: int = 2) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
            self.head = nn.Linear(d, 4096)

        def forward(self, x: Any) -> Any:
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    return Decoder().cuda().eval()


def _leaf_device_ns(prof: Any) -> dict[str, float]:
    """Each leaf layer's device self time, summed over the trace's samples."""
    parents = {layer.parent for layer in prof.layers}
    out = {}
    for layer in prof.layers:
        series = prof.samples[layer.path].device_self_ns
        if layer.path not in parents and series is not None:
            out[layer.path] = float(sum(series.values))
    return out


def check_graph_replay(out: Path) -> Check:
    name = "graph replay read through its capture"
    if (skip := _no_cuda(name)) is not None:
        return skip
    torch = _torch()
    import layerprof
    from layerprof.trace.capturepair import CaptureInput, analyze_pair

    model = _tiny_decoder()
    x = torch.randn(8, 256, 1024, device="cuda")
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with (
            torch.profiler.profile(activities=_acts(), with_stack=True) as pc,
            torch.cuda.graph(graph),
        ):
            model(x)
        _trace_of(pc, out / "graph-capture.json.gz")
        with torch.profiler.profile(activities=_acts()) as pr:
            for _ in range(GRAPH_REPLAYS):
                graph.replay()
            torch.cuda.synchronize()
        _trace_of(pr, out / "graph-replay.json.gz")
        with torch.profiler.profile(activities=_acts(), with_stack=True) as pe:
            for _ in range(GRAPH_REPLAYS):
                model(x)
            torch.cuda.synchronize()
        _trace_of(pe, out / "graph-eager.json.gz")
    merged = analyze_pair(
        str(out / "graph-replay.json.gz"), [CaptureInput(str(out / "graph-capture.json.gz"))]
    ).rank()
    eager = layerprof.analyze(str(out / "graph-eager.json.gz")).rank()
    return graph_verdict(name, merged, eager)


def graph_verdict(name: str, merged: Any, eager: Any) -> Check:
    """The replay read through its capture (``merged``) against an eager run's trace:
    >= 95 % of the replay's kernel time on layers, and each leaf layer holding at least
    ``GRAPH_HEAVY`` of the eager device time within ``GRAPH_LAYER_TOL`` of it."""
    r = merged.graph_replay
    if r is None or not r.device_ns:
        return Check(name, "fail", "no graph launch with device ops in the replay trace")
    share = r.matched_ns / r.device_ns
    got, want = _leaf_device_ns(merged), _leaf_device_ns(eager)
    total = sum(want.values()) or 1.0
    heavy = {p: w for p, w in want.items() if w >= GRAPH_HEAVY * total}
    off = {p: got.get(p, 0.0) / w - 1 for p, w in heavy.items()}
    bad_layers = {p: d for p, d in off.items() if abs(d) > GRAPH_LAYER_TOL}
    figures = {
        "share_on_layers": share, "kernels": r.kernels, "matched": r.matched,
        "captures_named": [c.named for c in r.captures],
        "missed": [(m.name[:80], m.count) for m in r.missed[:5]],
        "layers": {p: {"replay_ns": got.get(p), "eager_ns": w} for p, w in heavy.items()},
        "notes": [n.text for n in merged.notes if n.kind.startswith("graph-")],
    }  # fmt: skip
    bad = []
    if share < GRAPH_SHARE:
        bad.append(f"{100 * share:.1f} % of the replay's kernel time on layers (< 95 %)")
    if not heavy:
        bad.append("no leaf layer in the eager trace")
    bad += [f"{p} {100 * d:+.1f} % vs eager" for p, d in sorted(bad_layers.items())]
    if bad:
        return Check(name, "fail", "; ".join(bad), figures)
    worst = max(abs(d) for d in off.values())
    return Check(
        name,
        "pass",
        f"{100 * share:.1f} % of the replay's kernel time on layers; {len(heavy)} layers"
        f" within {100 * worst:.1f} % of eager",
        figures,
    )


def measure_card_peak() -> tuple[float, float]:
    """The card's best bf16 matmul FLOP/s (8192³, 2·n³ FLOPs) and device copy bytes/s
    (1 GiB read + written), by CUDA events: the best of eight after two warm-ups."""
    torch = _torch()
    n = 8192
    ma = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mb = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    flops = 2 * n**3 / (min(_event_ns(lambda: ma @ mb, 10)[2:]) / 1e9)
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() / (min(_event_ns(lambda: dst.copy_(src), 10)[2:]) / 1e9)
    return flops, bandwidth


def check_roofline(out: Path) -> Check:
    name = "roofline peak of the card"
    if (skip := _no_cuda(name)) is not None:
        return skip
    torch = _torch()
    from torch import nn

    import layerprof
    from layerprof.analysis.roofline import roofline

    flops, bandwidth = measure_card_peak()
    figures: dict[str, Any] = {"measured_bf16_flops_per_s": flops,
                               "measured_copy_bytes_per_s": bandwidth}  # fmt: skip
    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU()).cuda().eval()
    x = torch.randn(8192, 4096, device="cuda")
    bad = []
    table = layerprof.profile(model, x, device="cuda", dtype=torch.bfloat16, warmup=2, iters=5)
    peak = table.flops.peak if table.flops is not None else None
    if peak is not None and peak.flops_per_s and peak.bytes_per_s:
        figures.update(table_flops_per_s=peak.flops_per_s, table_bytes_per_s=peak.bytes_per_s,
                       table=peak.detail)  # fmt: skip
        # a datasheet rate is an upper bound of what the card reaches, and of its order
        if not 0.25 * peak.flops_per_s <= flops <= 1.05 * peak.flops_per_s:
            bad.append(f"measured {flops:.3g} FLOP/s vs table {peak.flops_per_s:.3g}")
        if not 0.25 * peak.bytes_per_s <= bandwidth <= 1.05 * peak.bytes_per_s:
            bad.append(f"measured {bandwidth:.3g} B/s vs table {peak.bytes_per_s:.3g}")
    else:
        figures["table"] = peak.detail if peak is not None else "no peak"
    given = layerprof.profile(model, x, device="cuda", dtype=torch.bfloat16, warmup=2, iters=5,
                              peak=f"{flops:.6g},{bandwidth:.6g}")  # fmt: skip
    line = roofline(given)
    points = {p.path: p for p in line.points} if line is not None else {}
    shares = {p: pt.peak_share for p, pt in points.items()}
    figures["layer_pct_of_measured_peak"] = {p: None if s is None else 100 * s
                                             for p, s in shares.items()}  # fmt: skip
    fc = shares.get("0")
    if fc is None:
        bad.append("no % of peak for the Linear")
    elif not 0.05 < fc <= 1.1:
        bad.append(f"the Linear at {100 * fc:.0f} % of the measured peak")
    if bad:
        return Check(name, "fail", "; ".join(bad), figures)
    return Check(name, "pass", "measured peak within the table's; % of peak per layer", figures)


CHECKS: dict[str, Callable[[Path], Check]] = {
    "environment": check_environment,
    "known_costs": check_known_costs,
    "no_sync_per_layer": check_no_sync_per_layer,
    "host_vs_device": check_host_vs_device,
    "training_loop": check_training_loop,
    "memory": check_memory,
    "analyze": check_analyze,
    "roofline": check_roofline,
    "graph_replay": check_graph_replay,
    "compiled": check_compiled,  # last: a cold inductor compile is the slowest
}


def run_one(key: str, fn: Callable[[Path], Check], out: Path, budget: float) -> Check:
    """One check within its budget; an exception (or the budget) is its ``fail``."""
    t0 = time.monotonic()
    try:
        with time_budget(budget):
            result = fn(out)
    except Exception as exc:  # one broken check never hides the others
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        result = Check(key, "fail", last)
    result.seconds = round(time.monotonic() - t0, 2)
    result.budget_s = budget
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def run_all(
    out: Path,
    checks: dict[str, Callable[[Path], Check]] | None = None,
    budgets: dict[str, float] | None = None,
    after: Callable[[list[Check]], None] | None = None,
) -> list[Check]:
    """Every check in order; ``after`` sees the results so far after each one."""
    results: list[Check] = []
    for key, fn in (checks or CHECKS).items():
        results.append(run_one(key, fn, out, (budgets or BUDGETS).get(key, 60.0)))
        if after is not None:
            after(results)
    return results


def write_report(
    out: Path, checks: list[Check], pytest_rc: int | None, pytest_line: str, complete: bool = True
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": "layerprof.gpu-check/1",
        "complete": complete,
        "tolerances": {
            "device_time": "|measured - known| <= 3 % of known + 5 us",
            "memory": "|measured - torch| <= 5 % of torch + 64 KiB",
            "latency": "within 10 % of a CUDA-event-timed bare loop",
        },
        "pytest": {"exit_code": pytest_rc, "summary": pytest_line},
        "checks": [asdict(c) for c in checks],
        "failed": [c.name for c in checks if c.status == "fail"],
    }
    (out / "gpu-report.json").write_text(json.dumps(doc, indent=1, default=str))
    lines = [f"pytest -m cuda: exit {pytest_rc}: {pytest_line}"]
    if not complete:
        lines.append("INCOMPLETE: the run stopped after the checks below")
    for c in checks:
        lines.append(f"{c.status.upper():5} {c.name} ({c.seconds} s of {c.budget_s:g}): {c.reason}")
        for key, value in c.figures.items():
            lines.append(f"        {key}: {value}")
    (out / "gpu-report.txt").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpu-report"))
    ap.add_argument("--pytest-rc", type=int, default=None)
    ap.add_argument("--pytest-line", default="")
    ap.add_argument("--only", default="", help="comma-separated check keys: " + ",".join(CHECKS))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    picked = {k: v for k, v in CHECKS.items() if not args.only or k in args.only.split(",")}

    def partial(done: list[Check]) -> None:
        write_report(args.out, done, args.pytest_rc, args.pytest_line, complete=False)

    checks = run_all(args.out, picked, after=partial)
    write_report(args.out, checks, args.pytest_rc, args.pytest_line)
    print((args.out / "gpu-report.txt").read_text(), end="")
    failed = any(c.status == "fail" for c in checks)
    pytest_failed = args.pytest_rc not in (None, 0, 5)  # 5: nothing collected
    return 1 if failed or pytest_failed else 0


if __name__ == "__main__":
    sys.exit(main())
