"""Findings name the bottleneck with the numbers behind it."""

from __future__ import annotations

from dataclasses import replace

import torch

import layerprof
from layerprof import Recorder
from layerprof.analysis.diagnose import MIN_FINDING_NS, checks, diagnose, diagnose_run
from layerprof.capture.platform.clocks import FakeClock
from layerprof.pivot.profile import Profile, Run, TraceSections
from layerprof.pivot.records import LayerInfo, LayerSamples, Meta, Overhead
from layerprof.pivot.sections.trace import CrossRank, DeviceUse, KindRow, RankLine
from tests.support import zoo_models as zoo


def fake(model_factory, **profile_fields):
    clock = FakeClock(scale=1000)
    model = model_factory(clock)
    with Recorder(model, clock=clock) as rec:
        for _ in range(3):
            model(torch.zeros(1))
    return replace(rec.profile(meta=Meta(model="m")), **profile_fields)


def test_bottleneck_layer_is_named() -> None:
    findings = diagnose(fake(zoo.Nested))
    top = findings[0]
    assert top.severity == "high" and top.layer == "a.a2"
    assert "55%" in top.detail  # 200 of 365


def test_quiet_profile_has_no_latency_findings() -> None:
    prof = fake(zoo.Nested, latency_ns=(1000, 1010, 1005, 1001, 1003), first_ns=1500)
    assert not [f for f in diagnose(prof) if "latency" in f.title or "first call" in f.title]


def test_noisy_cold_and_overhead_findings() -> None:
    prof = fake(
        zoo.Nested,
        latency_ns=(1000, 1000, 1000, 2000, 2500),
        first_ns=50_000,
    )
    titles = " | ".join(f.title for f in diagnose(prof))
    assert "noisy" in titles and "first call is 50x" in titles
    steady = (1000, 1010, 990, 1005, 995, 1000, 1002, 998, 1001, 999)
    overhead = Overhead(per_call_ns=2000, inside_ns=500, corrected=True, calls_per_forward=5,
                        clean_ns=1000, instrumented_ns=3000)  # fmt: skip
    titles = " | ".join(
        f.title for f in diagnose(fake(zoo.Nested, latency_ns=steady, overhead=overhead))
    )
    assert "slowed the forward 3.0x" in titles


def test_overhead_finding_rests_on_the_clean_interval() -> None:
    """5 samples give the median's CI as [min, max]: 3000 is not 1.5x beyond 2500."""
    noisy = (1000, 1000, 1000, 2000, 2500)
    overhead = Overhead(per_call_ns=2000, inside_ns=500, corrected=True, calls_per_forward=5,
                        clean_ns=1000, instrumented_ns=3000)  # fmt: skip
    prof = fake(zoo.Nested, latency_ns=noisy, overhead=overhead)
    assert not [f for f in diagnose(prof) if "slowed" in f.title]


def test_trace_findings_from_typed_sections() -> None:
    ms = 1_000_000
    gpu = DeviceUse(
        device=0, busy_ns=30 * ms, busy_in_window_ns=30 * ms, window_ns=100 * ms,
        idle_ns=70 * ms, utilization=0.3, kernel_ns=24 * ms, memcpy_ns=6 * ms, memset_ns=0,
        streams=1, host_wait_ns=60 * ms, short_gap_ns=1 * ms, other_idle_ns=9 * ms,
    )  # fmt: skip
    kinds = (KindRow("communication", 4, 20 * ms), KindRow("compute", 8, 10 * ms))
    rank0 = Profile(
        meta=Meta(model="m", source="trace"), trace=TraceSections(devices=(gpu,), kinds=kinds)
    )
    rank1 = replace(
        rank0.with_trace(devices=()), meta=Meta(model="m", source="trace", extra={"rank": 1})
    )
    rank0 = replace(rank0, meta=Meta(model="m", source="trace", extra={"rank": 0}))
    cross = CrossRank(
        steps=(),
        ranks=(RankLine(0, 100 * ms, 0, 0), RankLine(1, 130 * ms, 0, 0)),
        slowest_rank=1,
    )
    titles = [f.title for f in diagnose_run(Run(path="d", ranks=(rank0, rank1), cross=cross))]
    assert titles[0] == "rank 0: GPU 0 is idle 70% of the steps"
    assert any("memcpy" in t for t in titles)
    assert any("communication" in t for t in titles)
    assert any("slowest steps" in t for t in titles)
    idle = next(f for f in diagnose(rank0) if "idle" in f.title)
    assert "host cannot feed the GPU" in idle.hint  # the largest idle bucket decides


# ---- significance (11.6, 14.4) ------------------------------------------------------------


class SeedModel(torch.nn.Module):
    """The seed articles' MyModel: two small Linear layers, microseconds at batch 1."""

    def __init__(self) -> None:
        super().__init__()
        self.linear1 = torch.nn.Linear(100, 200)
        self.relu1 = torch.nn.ReLU()
        self.linear2 = torch.nn.Linear(200, 100)
        self.relu2 = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu2(self.linear2(self.relu1(self.linear1(x))))


class MatmulLeaf(torch.nn.Module):
    """A custom leaf whose work no type hint knows: matrix products in its forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(4):
            x = torch.tanh(x @ x)
        return x


class Heavy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heavy = MatmulLeaf()
        self.act = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.heavy(x))


def test_microsecond_layers_are_no_bottleneck() -> None:
    """Shares of a few µs (hook residue, noise) make no bottleneck finding."""
    prof = layerprof.profile(SeedModel(), torch.randn(1, 100), warmup=3, iters=20)
    named = [f for f in diagnose(prof) if "bottleneck" in f.title or "outside" in f.title]
    for f in named:  # only a machine loaded enough to stretch them past the floor names one
        s = prof.samples[f.layer or ""].self_ns.summary
        assert s.ci_low is not None and s.ci_low >= MIN_FINDING_NS, f
    if max(r.self_ns for r in prof.rows()) < MIN_FINDING_NS:  # as on any machine at rest
        assert not named
    # the same shares in a fake-clock model 1000x slower are findings
    assert not [f for f in diagnose(fake_scaled(zoo.Nested, 1)) if "bottleneck" in f.title]
    assert [f for f in diagnose(fake_scaled(zoo.Nested, 1000)) if "bottleneck" in f.title]


def fake_scaled(model_factory, scale: int) -> Profile:
    clock = FakeClock(scale=scale)
    model = model_factory(clock)
    with Recorder(model, clock=clock) as rec:
        for _ in range(3):
            model(torch.zeros(1))
    return rec.profile(meta=Meta(model="m"))


def test_bottleneck_needs_its_share_at_the_low_end_of_its_interval() -> None:
    """'a' is the largest layer with a 31% median share, but its samples spread from 50
    to 500 µs: the low end of its share's CI is 14% of the forward, so it is no
    bottleneck; with the same median and no spread it is."""
    us = 1000
    spread = [v * us for v in (50, 80, 100, 150, 200, 275, 275, 350, 400, 450, 480, 500)]

    def profile(a_self: list[int]) -> Profile:
        steady = [200 * us] * len(a_self)
        layers = [LayerInfo("", "M", None), LayerInfo("a", "A", "")]
        samples = {
            "": LayerSamples(
                total_ns=[a + 600 * us for a in a_self], self_ns=[0] * len(a_self), calls=1
            ),
            "a": LayerSamples(total_ns=a_self, self_ns=a_self, calls=1),
        }
        for name in "bcd":
            layers.append(LayerInfo(name, "B", ""))
            samples[name] = LayerSamples(total_ns=steady, self_ns=steady, calls=1)
        return Profile(meta=Meta(model="m"), layers=tuple(layers), samples=samples)

    noisy = profile(spread)
    assert 0.25 < noisy.row("a").self_ns / noisy.row("").total_ns < 0.35  # the premise
    assert not [f for f in diagnose(noisy) if "bottleneck" in f.title]
    steady = profile([275 * us] * len(spread))
    (found,) = [f for f in diagnose(steady) if "bottleneck" in f.title]
    assert found.layer == "a" and "95% CI" not in found.detail  # no spread, no interval shown


def test_ops_runs_name_operators_instead_of_suggesting_ops() -> None:
    x = torch.randn(192, 192) / 20
    # 12 iterations: one disturbed by another process cannot sink the share's interval
    hooks = layerprof.profile(Heavy(), x, warmup=1, iters=12)
    ops = layerprof.profile(Heavy(), x, warmup=1, iters=12, ops=True)
    top = [f for f in diagnose(hooks) if f.layer == "heavy"]
    assert top and "--ops" in top[0].hint, diagnose(hooks)  # hooks mode: suggest ops
    found = [f for f in diagnose(ops) if f.layer == "heavy"]
    assert found and "aten::mm" in found[0].detail, diagnose(ops)
    assert not [f for f in diagnose(ops) if "--ops" in f.hint + f.detail]


def test_empty_findings_list_the_checks() -> None:
    prof = fake_scaled(zoo.Nested, 1)
    prof = replace(prof, latency_ns=(1000, 1001, 999, 1000, 1000, 1002, 998))
    assert diagnose(prof) == []
    ran = checks(prof)
    assert any(c.startswith("bottleneck layers") for c in ran) and "latency noise" in ran
    assert "hook overhead" not in ran  # this profile has no overhead numbers to check
    text = prof.render("console")
    assert "findings: nothing to flag" in text
    assert "checked: bottleneck layers" in text and "latency noise" in text
    page = str(prof.render("html"))
    assert "nothing worth flagging. Checked: bottleneck layers" in page


def test_a_steady_share_under_contention_is_still_the_bottleneck() -> None:
    """Contention stretches whole forwards (1 to 20 ms here) but leaves the share of a
    layer that does 95% of each forward alone: the share's interval decides."""
    ms = 1_000_000
    heavy = [v * ms for v in (1, 20, 5, 10, 2, 1, 7, 15, 1, 3)]
    light = [h // 19 for h in heavy]
    prof = Profile(
        meta=Meta(model="m"),
        layers=(LayerInfo("", "M", None), LayerInfo("heavy", "H", ""), LayerInfo("act", "A", "")),
        samples={
            "": LayerSamples(total_ns=[h + s for h, s in zip(heavy, light, strict=True)], self_ns=[0] * 10, calls=1),
            "heavy": LayerSamples(total_ns=heavy, self_ns=heavy, calls=1),
            "act": LayerSamples(total_ns=light, self_ns=light, calls=1),
        },
    )  # fmt: skip
    (found,) = [f for f in diagnose(prof) if "bottleneck" in f.title]
    assert found.layer == "heavy" and "95% CI" in found.detail


def test_an_empty_run_lists_its_checks_too() -> None:
    quiet = replace(fake_scaled(zoo.Nested, 1), latency_ns=(1000, 1001, 999, 1000, 1000, 1002))
    rank0 = replace(quiet, meta=Meta(model="m", source="trace", extra={"rank": 0}))
    rank1 = replace(quiet, meta=Meta(model="m", source="trace", extra={"rank": 1}))
    cross = CrossRank(
        steps=(), ranks=(RankLine(0, 1000, 0, 0), RankLine(1, 1001, 0, 0)), slowest_rank=1
    )
    run = Run(path="d", ranks=(rank0, rank1), cross=cross)
    assert diagnose_run(run) == []
    text = run.render("console")
    assert "findings: nothing to flag" in text and "stragglers across ranks" in text
    assert "Checked: bottleneck layers" in str(run.render("html"))


def test_ops_tied_to_no_layer_say_nothing_of_python_work() -> None:
    """A trace's operators carry no layer: its bottleneck may not read "no operators ran in
    its own code (Python work)" while a convolution took the time (found by a new user)."""
    from layerprof.pivot.records import OpStat

    prof = fake(zoo.Nested)
    untied = replace(prof, ops=(OpStat("aten::mkldnn_convolution", 1.0, 2e5, 2e5),))
    top = diagnose(untied)[0]
    assert top.layer == "a.a2" and "Python work" not in top.detail
    tied = replace(prof, ops=(OpStat("aten::add", 1.0, 1e3, 1e3, layer="b"),))
    assert "Python work" in diagnose(tied)[0].detail  # ops tied to layers, none to this one
