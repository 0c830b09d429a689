"""Issue 22 on a real compiled conv + BatchNorm + ReLU net (compiled once per module).

* layerprof's own hooks make nothing recompile: they go on before the compile
  (torch 2.14 guards ``not module._forward_hooks``; hooks added after the
  compile recompiled every region in the profiled forwards);
* a kernel that does a convolution's work gives it to the conv, not to the
  BatchNorm it is fused with;
* ``diff eager.json compiled.json``: a container whose code was fused into its
  children's kernels does not read "-100 %";
* the compiled view says when its per-layer pass disagrees with the clean latency.

``.ci/run`` runs this file under the newest torch too (a venv of its own).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import layerprof
from layerprof.analysis.compiled import compiled_findings
from layerprof.analysis.diff import diff
from layerprof.capture.compiled.regions import HOOK_KEY
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import OUTSIDE_ROW, OVERHEAD_ROW
from layerprof.pivot.sections.compiled import Recompile
from layerprof.stats import Series

ITERS = 6
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("inductor_dir")]


class ConvNet(nn.Module):
    """A stem block, then a convolution with a large weight: inductor reorders that
    weight in the kernel that also runs the stem's BatchNorm and ReLU. The root is a
    class of the user's (torch's own modules get no range hooks), so layerprof's hooks
    are on it while it compiles."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()
        )
        self.conv = nn.Conv2d(16, 64, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(64)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(self.stem(x))))


def conv_net() -> nn.Module:
    torch.manual_seed(0)
    return ConvNet().eval()


def image() -> torch.Tensor:
    return torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def runs() -> tuple[nn.Module, Profile, Profile]:
    """(model, eager profile, compiled profile)"""
    model = conv_net()
    options = {"warmup": 1, "iters": ITERS, "threads": 1}
    eager = layerprof.profile(model, image(), **options)  # type: ignore[arg-type]
    compiled = layerprof.profile(model, image(), compile=True, **options)  # type: ignore[arg-type]
    return model, eager, compiled


def test_layerprofs_hooks_make_nothing_recompile(runs: tuple[nn.Module, Profile, Profile]) -> None:
    model, _, profile = runs
    c = profile.compiled
    assert c is not None
    assert HOOK_KEY not in model._forward_pre_hooks  # (on while it ran)
    assert c.recompiles == (), [r.reason for r in c.recompiles]
    assert not [n for n in profile.notes if n.kind == "recompile"]
    assert not [f for f in compiled_findings(profile) if "recompilation" in f.title]
    # and the hooks that were on during the run are off again
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks


def test_a_batchnorm_gets_no_convolution_time(runs: tuple[nn.Module, Profile, Profile]) -> None:
    """The kernel that runs the stem's BatchNorm + ReLU also lays out ``conv``'s weight
    (9,216 elements against the BatchNorm's 1,024): most of it is the conv's."""
    c = runs[2].compiled
    assert c is not None
    listing = [k for k in c.kernels if not k.extern and "convolution" in k.name]
    assert listing, [k.name for k in c.kernels]
    for k in listing:
        shares = {s.path: s.share for s in k.split}
        convs = [p for p in shares if p in ("stem.0", "conv")]
        norms = [p for p in shares if p in ("stem.1", "bn")]
        assert convs, (k.name, shares)
        assert max(shares[p] for p in convs) > max((shares[p] for p in norms), default=0.0)


def test_a_fused_container_does_not_read_as_minus_100_percent(
    runs: tuple[nn.Module, Profile, Profile],
) -> None:
    _, eager, compiled = runs
    d = diff(eager, compiled)
    rows = {r.path: r for r in d.layers}
    for path in ("", "stem"):  # the root and the stem: containers, no kernel of their own
        row = rows[path]
        assert row.change.delta_pct is None or row.change.delta_pct > -100, path
        if eager.samples[path].self_ns.median > 0:
            assert row.note is not None and "no kernel of its own" in row.note
            assert row.status == "same" and row.total.delta_pct is not None
    assert rows["stem.0"].note is None  # a leaf is compared as usual
    assert "-100.0 %" not in d.to_markdown()


def with_passes(profile: Profile, clean_us: int, forward_us: int, kernels_us: int) -> Profile:
    """The real compiled profile with a clean pass of ``clean_us`` and profiled forwards
    of ``forward_us`` of which ``kernels_us`` in kernels (the rest: compiled overhead)."""
    n = ITERS
    samples = dict(profile.samples)
    root = samples[""]
    samples[""] = dataclasses.replace(root, total_ns=Series([forward_us * 1000] * n))
    rest = (forward_us - kernels_us) * 1000
    for row, ns in ((OVERHEAD_ROW, rest), (OUTSIDE_ROW, 0)):
        samples[row] = dataclasses.replace(samples[row], total_ns=Series([ns] * n),
                                           self_ns=Series([ns] * n))  # fmt: skip
    return dataclasses.replace(profile, latency_ns=Series([clean_us * 1000] * n), samples=samples)


def agreement(profile: Profile) -> list[str]:
    return [f"{f.severity}: {f.title}" for f in compiled_findings(profile) if "pass" in f.title
            or "clean forward" in f.title]  # fmt: skip


def test_the_compiled_pass_is_checked_against_the_clean_latency(
    runs: tuple[nn.Module, Profile, Profile],
) -> None:
    profile = runs[2]
    # kernels that add up to more than the whole clean forward: they ran slower
    assert agreement(with_passes(profile, 1400, 3000, 1500)) == [
        "high: the numbers are unreliable: the compiled layers add up to more than the clean"
        " forward"
    ]
    # a profiled forward 1.5x the clean one (the BERT case was 1.36x, and silent)
    assert agreement(with_passes(profile, 2000, 3000, 1500)) == [
        "warning: the compiled per-layer pass disagrees with the clean latency"
    ]
    # passes that agree: nothing
    assert agreement(with_passes(profile, 2600, 3000, 1500)) == []


def test_a_hook_guard_recompile_is_not_told_to_use_dynamic(
    runs: tuple[nn.Module, Profile, Profile],
) -> None:
    profile = runs[2]
    c = profile.compiled
    assert c is not None
    reason = "0/0: not module._forward_hooks  # if not (self._backward_hooks or"
    section = dataclasses.replace(c, recompiles=(Recompile("0/1", "Net.__call__", reason),))
    found = [f for f in compiled_findings(dataclasses.replace(profile, compiled=section))
             if "recompilation" in f.title]  # fmt: skip
    assert len(found) == 1
    assert "hooks" in found[0].title and "layerprof" in found[0].detail
    assert "--dynamic does not help" in found[0].hint
