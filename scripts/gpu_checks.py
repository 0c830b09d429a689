"""The CUDA truth check's measurements (issue 37): known costs on a real GPU, checked
against layerprof's numbers. Run by ``scripts/gpu-check.sh``; by hand:

    PYTHONPATH=src python scripts/gpu_checks.py --out gpu-report [--pytest-rc N --pytest-line '...']

Each check is a function that returns a ``Check`` (pass, fail or skip, a one-line
reason, the figures it measured). One that raises is a ``fail`` naming the error,
so a broken check never hides the others. Without CUDA every check is ``skip`` with
its reason, the report is still written and the exit code is 0 (the dry run that
keeps this script from rotting on CPU-only machines). Writes ``gpu-report.json`` and
``gpu-report.txt`` into ``--out``; exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Tolerance of a measured device time against a known one: 3 % plus 5 µs.
REL_TOL, ABS_TOL_NS = 0.03, 5_000
#: Known sleep durations of the known-cost layers (µs).
SLEEPS_US = (200, 400, 800)


@dataclass
class Check:
    name: str
    status: str  # pass | fail | skip
    reason: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def within(measured_ns: float, known_ns: float) -> bool:
    """The check's tolerance rule: ``|measured - known| <= 3 % of known + 5 µs``."""
    return abs(measured_ns - known_ns) <= REL_TOL * known_ns + ABS_TOL_NS


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``y = a x + b`` (the sleep calibration: cycles -> ns)."""
    n = len(xs)
    if n < 2:
        raise ValueError("a line needs two points")
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        raise ValueError("the points have one x")
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
    return a, my - a * mx


SYNC_NAMES = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")


def count_syncs(trace: dict[str, Any]) -> int:
    """Host-side synchronizes in a Chrome trace torch.profiler wrote."""
    return sum(
        1
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "X" and any(str(e.get("name", "")).startswith(n) for n in SYNC_NAMES)
    )


def busy_union_ns(trace: dict[str, Any], lo_us: float, hi_us: float) -> float:
    """GPU busy time inside ``[lo, hi)`` (µs in the trace) recomputed from the raw
    events: the union of kernel, memcpy and memset intervals."""
    spans = sorted(
        (max(float(e["ts"]), lo_us), min(float(e["ts"]) + float(e["dur"]), hi_us))
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    total, end = 0.0, lo_us
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


# ---- the checks (each needs CUDA) -----------------------------------------------------


def _cuda() -> Any:
    import torch

    return torch


def check_environment() -> Check:
    torch = _cuda()
    figures = {"torch": torch.__version__, "cuda": bool(torch.cuda.is_available())}
    if not torch.cuda.is_available():
        return Check("environment", "skip", "no CUDA device", figures)
    figures["device"] = torch.cuda.get_device_name(0)
    return Check("environment", "pass", figures["device"], figures)


def calibrate_sleep() -> tuple[float, float]:
    """``torch.cuda._sleep(cycles)`` cycles -> ns on this card, by CUDA events."""
    torch = _cuda()
    xs, ys = [], []
    for cycles in (100_000, 400_000, 1_600_000, 3_200_000):
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            torch.cuda.synchronize()
            xs.append(float(cycles))
            ys.append(start.elapsed_time(end) * 1e6)
    return fit_line(xs, ys)


def _known_cost_model(cycles_for: Callable[[float], int]) -> Any:
    torch = _cuda()
    from torch import nn

    class Sleep(nn.Module):
        def __init__(self, us: int) -> None:
            super().__init__()
            self.us, self.cycles = us, cycles_for(us * 1000)

        def forward(self, x: Any) -> Any:
            torch.cuda._sleep(self.cycles)
            return x

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sleeps = nn.ModuleList(Sleep(us) for us in SLEEPS_US)
            self.conv = nn.Conv2d(16, 32, 3, padding=1)
            self.fc = nn.Linear(32 * 32 * 32, 64)

        def forward(self, x: Any) -> Any:
            for s in self.sleeps:
                x = s(x)
            return self.fc(self.conv(x).flatten(1))

    return Net().cuda().eval()


def check_known_costs() -> Check:
    torch = _cuda()
    if not torch.cuda.is_available():
        return Check("known costs per layer", "skip", "no CUDA device")
    import layerprof

    a, b = calibrate_sleep()

    def cycles_for(ns: float) -> int:
        return max(int((ns - b) / a), 1)

    model = _known_cost_model(cycles_for)
    x = torch.randn(8, 16, 32, 32, device="cuda")
    prof = layerprof.profile(model, x, device="cuda", warmup=3, iters=20)
    rows = {r.path: r for r in prof.rows()}
    figures: dict[str, Any] = {"ns_per_cycle": a, "offset_ns": b}
    bad = []
    for i, us in enumerate(SLEEPS_US):
        row = rows[f"sleeps.{i}"]
        measured = row.device_self_ns
        figures[f"sleeps.{i}"] = {"known_us": us, "device_self_us": (measured or 0) / 1e3}
        if measured is None or not within(measured, us * 1000):
            bad.append(f"sleeps.{i}: {measured} ns for {us} us")
    # latency against a bare loop timed by CUDA events
    times = []
    with torch.inference_mode():
        for _ in range(20):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(x)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e6)
    bare = sorted(times)[len(times) // 2]
    assert prof.latency is not None
    figures["latency_ms"], figures["bare_event_ms"] = prof.latency.median / 1e6, bare / 1e6
    if abs(prof.latency.median - bare) > 0.10 * bare:
        bad.append(f"latency {prof.latency.median / 1e6:.3f} ms vs bare {bare / 1e6:.3f} ms")
    if bad:
        return Check("known costs per layer", "fail", "; ".join(bad), figures)
    return Check("known costs per layer", "pass", "within 3 % + 5 us, latency within 10 %", figures)


def check_no_sync_per_layer(out: Path) -> Check:
    torch = _cuda()
    if not torch.cuda.is_available():
        return Check("no synchronize per layer", "skip", "no CUDA device")
    from torch import nn

    import layerprof

    layers = 64
    model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(layers)]).cuda().eval()
    x = torch.randn(32, 256, device="cuda")
    iters = 10
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as p:
        layerprof.profile(model, x, device="cuda", warmup=2, iters=iters)
    path = out / "layerprof-own-pass.json"
    p.export_chrome_trace(str(path))
    syncs = count_syncs(json.loads(path.read_text()))
    calls = layers * (iters + 2) * 2  # both passes, every layer
    figures = {"synchronizes": syncs, "layer_calls": calls}
    if syncs >= calls // 4:
        return Check(
            "no synchronize per layer", "fail", f"{syncs} syncs for {calls} calls", figures
        )
    return Check(
        "no synchronize per layer", "pass", f"{syncs} syncs for {calls} layer calls", figures
    )


def check_host_vs_device() -> Check:
    torch = _cuda()
    if not torch.cuda.is_available():
        return Check("host vs device", "skip", "no CUDA device")
    from torch import nn

    import layerprof

    tiny = nn.Sequential(*[nn.Linear(4, 4) for _ in range(100)]).cuda().eval()
    big = nn.Sequential(*[nn.Linear(8192, 8192) for _ in range(4)]).cuda().eval()
    p_tiny = layerprof.profile(tiny, torch.randn(1, 4, device="cuda"), device="cuda", iters=20)
    p_big = layerprof.profile(big, torch.randn(4096, 8192, device="cuda"), device="cuda", iters=10)

    def share(p: Any) -> float:
        root = next(r for r in p.rows() if r.path == "")
        return (root.device_total_ns or 0) / (p.latency.median or 1)

    figures = {"host_bound_device_share": share(p_tiny), "device_bound_device_share": share(p_big)}
    ok = figures["host_bound_device_share"] < 0.5 < figures["device_bound_device_share"]
    return Check("host vs device", "pass" if ok else "fail", "device share of latency", figures)


def check_training_loop() -> Check:
    torch = _cuda()
    if not torch.cuda.is_available():
        return Check("backward and step anatomy (AMP bf16)", "skip", "no CUDA device")
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
    assert prof.loop is not None
    bad = [s.index for s in prof.loop.steps if sum(ns for _, ns in s.parts()) != s.wall_ns]
    rows = {r.path: r for r in prof.rows()}
    figures = {"backward_ms": prof.loop.summary("backward").median / 1e6,
               "fc0_backward_ms": (rows["0"].backward_total_ns or 0) / 1e6}  # fmt: skip
    if bad or not rows["0"].backward_total_ns:
        return Check("backward and step anatomy (AMP bf16)", "fail", f"steps {bad}", figures)
    return Check("backward and step anatomy (AMP bf16)", "pass", "parts add up", figures)


def check_memory() -> Check:
    torch = _cuda()
    if not torch.cuda.is_available():
        return Check("memory per layer", "skip", "no CUDA device")
    from torch import nn

    import layerprof

    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
    x = torch.randn(256, 1024, device="cuda")
    prof = layerprof.profile(model, x, device="cuda", backward=True, warmup=1, iters=3)
    section = prof.activation_memory
    if section is None:
        return Check("memory per layer", "fail", "no activation memory section")
    own = {r.path: r.activations_self for r in section.rows}
    # Linear saves its input; ReLU its output (the second Linear's input: one storage)
    expected = {"0": 256 * 1024 * 4, "1": 256 * 4096 * 4}
    figures = {"own": own, "expected": expected,
               "peaks": [(p.phase, p.peak_bytes) for p in section.peaks]}  # fmt: skip
    ok = all(own.get(k) == v for k, v in expected.items()) and bool(section.peaks)
    return Check("memory per layer", "pass" if ok else "fail", "saved bytes vs analytic", figures)


def check_compiled() -> Check:
    torch = _cuda()
    if not torch.cuda.is_available():
        return Check("--compile on CUDA", "skip", "no CUDA device")
    from torch import nn

    import layerprof

    model = nn.Sequential(nn.LayerNorm(512), nn.Linear(512, 2048), nn.GELU(),
                          nn.Linear(2048, 512)).cuda().eval()  # fmt: skip
    prof = layerprof.profile(model, torch.randn(64, 512, device="cuda"), device="cuda",
                             compile=True, warmup=2, iters=10)  # fmt: skip
    c = prof.compiled
    if c is None:
        return Check("--compile on CUDA", "fail", "no compiled section")
    share = c.coverage.attributed_ns / c.coverage.region_ns if c.coverage.region_ns else 0.0
    figures = {"attributed_share": share, "recompiles": len(c.recompiles), "breaks": len(c.breaks)}
    ok = share >= 0.9 and not c.recompiles
    return Check("--compile on CUDA", "pass" if ok else "fail", "Triton kernels per layer", figures)


def check_analyze(out: Path) -> Check:
    torch = _cuda()
    if not torch.cuda.is_available():
        return Check("analyze of a CUDA trace", "skip", "no CUDA device")
    import layerprof

    a = torch.randn(2048, 2048, device="cuda")
    host = torch.randn(1 << 22).pin_memory()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, schedule=torch.profiler.schedule(
            wait=0, warmup=1, active=3)) as p:  # fmt: skip
        for _ in range(4):
            with torch.profiler.record_function("step"):
                (a @ a).sum()
                host.to("cuda", non_blocking=True)
                torch.cuda.synchronize()
            p.step()
    path = out / "cuda-trace.json.gz"
    p.export_chrome_trace(str(out / "cuda-trace.json"))
    path.write_bytes(gzip.compress((out / "cuda-trace.json").read_bytes()))
    prof = layerprof.analyze(str(path)).rank()
    raw = json.loads((out / "cuda-trace.json").read_text())
    steps = [e for e in raw["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    lo = min(float(e["ts"]) for e in steps)
    hi = max(float(e["ts"]) + float(e["dur"]) for e in steps)
    recomputed = busy_union_ns(raw, lo, hi)
    dev = prof.devices[0] if prof.devices else None
    figures = {"busy_in_window_ns": dev.busy_in_window_ns if dev else None,
               "recomputed_ns": recomputed, "kernels": len(prof.kernels),
               "memcpy_rows": len(prof.memcpy)}  # fmt: skip
    ok = dev is not None and within(dev.busy_in_window_ns, recomputed) and bool(prof.memcpy)
    return Check("analyze of a CUDA trace", "pass" if ok else "fail", "busy vs raw JSON", figures)


def check_roofline() -> Check:
    torch = _cuda()
    if not torch.cuda.is_available():
        return Check("roofline peak of the card", "skip", "no CUDA device")
    from torch import nn

    import layerprof

    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU()).cuda().eval()
    prof = layerprof.profile(model, torch.randn(2048, 4096, device="cuda"), device="cuda",
                             dtype=torch.bfloat16, iters=10)  # fmt: skip
    peak = prof.flops.peak if prof.flops is not None else None
    figures = {"flops_per_s": getattr(peak, "flops_per_s", None),
               "bytes_per_s": getattr(peak, "bytes_per_s", None),
               "source": getattr(peak, "source", None)}  # fmt: skip
    ok = peak is not None and bool(peak.flops_per_s) and bool(peak.bytes_per_s)
    return Check("roofline peak of the card", "pass" if ok else "fail", "measured peak", figures)


def run_all(out: Path) -> list[Check]:
    checks: list[Callable[[], Check]] = [
        check_environment,
        check_known_costs,
        lambda: check_no_sync_per_layer(out),
        check_host_vs_device,
        check_training_loop,
        check_memory,
        check_compiled,
        lambda: check_analyze(out),
        check_roofline,
    ]
    results = []
    for fn in checks:
        t0 = time.monotonic()
        try:
            result = fn()
        except Exception as exc:  # one broken check never hides the others
            name = getattr(fn, "__name__", "check").removeprefix("check_")
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            result = Check(name, "fail", last)
        result.seconds = round(time.monotonic() - t0, 2)
        results.append(result)
    return results


def write_report(out: Path, checks: list[Check], pytest_rc: int | None, pytest_line: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": "layerprof.gpu-check/1",
        "pytest": {"exit_code": pytest_rc, "summary": pytest_line},
        "checks": [asdict(c) for c in checks],
        "failed": [c.name for c in checks if c.status == "fail"],
    }
    (out / "gpu-report.json").write_text(json.dumps(doc, indent=1, default=str))
    lines = [f"pytest -m cuda: exit {pytest_rc}: {pytest_line}"]
    for c in checks:
        lines.append(f"{c.status.upper():5} {c.name} ({c.seconds} s): {c.reason}")
        for key, value in c.figures.items():
            lines.append(f"        {key}: {value}")
    (out / "gpu-report.txt").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpu-report"))
    ap.add_argument("--pytest-rc", type=int, default=None)
    ap.add_argument("--pytest-line", default="")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    checks = run_all(args.out)
    write_report(args.out, checks, args.pytest_rc, args.pytest_line)
    print((args.out / "gpu-report.txt").read_text(), end="")
    failed = any(c.status == "fail" for c in checks)
    pytest_failed = args.pytest_rc not in (None, 0, 5)  # 5: nothing collected
    return 1 if failed or pytest_failed else 0


if __name__ == "__main__":
    sys.exit(main())
