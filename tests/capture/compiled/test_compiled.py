"""``--compile`` on real models, compiled by inductor (g++ builds the CPU kernels).

Compiling is the expensive part: every model here is compiled once per module
(module-scoped fixtures), inductor's on-disk cache lives in a temporary
directory of this module's own, and one compile thread avoids starting a
worker pool. The other compiled-view tests (attribution on fake traces, the
gate, the codec, the console) compile nothing.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerprof
from layerprof.analysis.diagnose import diagnose
from layerprof.capture.options import CompileOptions
from layerprof.cli import main
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import BUCKET_ROWS, OUTSIDE_ROW, OVERHEAD_ROW
from layerprof.pivot.sections.compiled import Recompile
from layerprof.trace.compiled import (
    ALLOCATIONS,
    CACHE_LOOKUP,
    CALL_PREFIX,
    FORWARD_MARK,
    REGION_PREFIXES,
)
from tests.support.paths import ROOT
from tests.support.real_models import BasicBlock, TinyGPT

ITERS = 6
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("inductor_dir")]


def gpt(dim: int = 128) -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(vocab=256, dim=dim, heads=4, depth=2).eval()


def ids(batch: int = 8, length: int = 64) -> torch.Tensor:
    return torch.randint(0, 256, (batch, length), generator=torch.Generator().manual_seed(0))


def run(model: nn.Module, *args: Any, **options: Any) -> Profile:
    return layerprof.profile(
        model, *args, warmup=1, iters=ITERS, threads=1, compile=options.pop("compile", True),
        **options,
    )  # fmt: skip


@pytest.fixture(scope="module")
def gpt_run() -> tuple[TinyGPT, Profile]:
    model = gpt()
    return model, run(model, ids())


# ---- the 2-block transformer: the three checks --------------------------------------


def test_most_of_the_compiled_region_is_attributed(gpt_run: tuple[TinyGPT, Profile]) -> None:
    c = gpt_run[1].compiled
    assert c is not None
    # ~0.95 on a quiet machine; a stall in the wrappers between kernels lowers it (0.88
    # seen under load), and the gate is for attribution, not for the machine
    assert c.coverage.attributed_share >= 0.75, c.coverage
    assert not c.unmatched and not c.breaks
    assert [g.phase for g in c.graphs] == ["forward"] and c.graphs[0].calls == 1.0


def forward_windows(profile: Profile) -> list[list[dict[str, Any]]]:
    """Per profiled forward, its events in time order (from the Chrome trace)."""
    assert profile.events is not None
    events = [e for e in profile.events.trace_events if e.get("ph") == "X"]
    events.sort(key=lambda e: (e["ts"], -e["dur"]))
    marks = [e for e in events if e["name"] == FORWARD_MARK]
    return [
        [e for e in events if m["ts"] <= e["ts"] and e["ts"] + e["dur"] <= m["ts"] + m["dur"]]
        for m in marks
    ]


def linear_order(model: nn.Module, *args: Any) -> list[str]:
    """Linear layers in the order an eager forward calls them."""
    order: list[str] = []
    handles = [
        m.register_forward_pre_hook(lambda mod, a, p=p: order.append(p))
        for p, m in model.named_modules()
        if isinstance(m, nn.Linear)
    ]
    with torch.no_grad():
        model(*args)
    for h in handles:
        h.remove()
    return order


def test_every_linear_row_is_its_matmul_events(gpt_run: tuple[TinyGPT, Profile]) -> None:
    """The k-th matmul under the compiled graph's call is the k-th Linear the eager
    forward calls: its durations, iteration by iteration, are that Linear's row."""
    model, profile = gpt_run
    linears = linear_order(model, ids())
    windows = forward_windows(profile)
    assert len(windows) == ITERS
    for i, window in enumerate(windows):
        calls = [e for e in window if e["name"].startswith(CALL_PREFIX)]
        matmuls = [
            e for e in window
            if e["name"] in ("aten::addmm", "aten::mm")
            and any(c["ts"] <= e["ts"] <= c["ts"] + c["dur"] for c in calls)
            and _depth_below(e, calls, window) == 1
        ]  # fmt: skip
        assert len(matmuls) == len(linears)
        expected: dict[str, int] = defaultdict(int)
        for path, event in zip(linears, matmuls, strict=True):
            expected[path] += round(event["dur"] * 1000)
        for path, ns in expected.items():
            got = profile.samples[path].self_ns.values[i]
            assert abs(got - ns) <= 1, (path, i, got, ns)


def _depth_below(event: dict[str, Any], calls: list[dict[str, Any]], window: list[Any]) -> int:
    """How many spans lie between ``event`` and the ``## Call`` span around it (1: a child)."""
    end = event["ts"] + event["dur"]
    outer = [
        e for e in window
        if e is not event and e["ts"] <= event["ts"] and end <= e["ts"] + e["dur"]
    ]  # fmt: skip
    call = next(c for c in calls if c in outer)
    return sum(1 for e in outer if e["ts"] >= call["ts"] and e is not call) + 1


def test_rows_and_buckets_add_up_to_each_forward(gpt_run: tuple[TinyGPT, Profile]) -> None:
    _, profile = gpt_run
    windows = forward_windows(profile)
    leaves = [i.path for i in profile.layers]
    for i, window in enumerate(windows):
        forward_ns = round(window[0]["dur"] * 1000)
        selfs = sum(int(profile.samples[p].self_ns.values[i]) for p in leaves)
        assert abs(selfs - forward_ns) <= 2, (i, selfs, forward_ns)
        root_total = int(profile.samples[""].total_ns.values[i])
        assert root_total == selfs
    c = profile.compiled
    assert c is not None
    cov = c.coverage
    mean_rows = sum(profile.samples[p].self_ns.mean for p in leaves)
    assert abs(mean_rows - cov.forward_ns) <= 1 + 1e-6 * cov.forward_ns


def test_coverage_is_the_trace_events_durations(gpt_run: tuple[TinyGPT, Profile]) -> None:
    """Each coverage part, from the exported events apart from the attribution: the
    forward mark's duration; the kernels (the compiled call's direct children, less
    allocations); the outermost compiled regions and cache lookups (kernels and
    overhead); the rest of the window (outside)."""
    _, profile = gpt_run
    parts: dict[str, list[int]] = defaultdict(list)
    for window in forward_windows(profile):
        calls = [e for e in window if e["name"].startswith(CALL_PREFIX)]
        kernels = [
            e for e in window
            if e not in calls and e["name"] not in ALLOCATIONS
            and any(c["ts"] <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"] for c in calls)
            and _depth_below(e, calls, window) == 1
        ]  # fmt: skip
        compiled = [
            e for e in window
            if e["name"].startswith(REGION_PREFIXES) or e["name"] == CACHE_LOOKUP
        ]  # fmt: skip
        outermost = [
            e for e in compiled
            if not any(o is not e and o["name"].startswith(REGION_PREFIXES)
                       and o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"]
                       for o in compiled)
        ]  # fmt: skip
        forward = round(window[0]["dur"] * 1000)
        regions = sum(round(e["dur"] * 1000) for e in outermost)
        attributed = sum(round(e["dur"] * 1000) for e in kernels)
        parts["forward"].append(forward)
        parts["attributed"].append(attributed)
        parts["overhead"].append(regions - attributed)
        parts["outside"].append(forward - regions)
    c = gpt_run[1].compiled
    assert c is not None
    expected = {k: sum(v) / len(v) for k, v in parts.items()}
    cov = c.coverage
    got = {"forward": cov.forward_ns, "attributed": cov.attributed_ns,
           "overhead": cov.overhead_ns, "outside": cov.outside_ns}  # fmt: skip
    slack = 2 + 1e-5 * expected["forward"]  # µs text rounded to ns, means rounded
    assert expected["outside"] > 0 and expected["overhead"] > 0
    for key, ns in expected.items():
        assert abs(got[key] - ns) <= slack, (key, got[key], ns)


def test_rows_are_module_paths_or_buckets(gpt_run: tuple[TinyGPT, Profile]) -> None:
    model, profile = gpt_run
    paths = {p for p, _ in model.named_modules()}
    for row in profile.rows():
        assert row.path in paths or row.path in BUCKET_ROWS
    timed = {r.path for r in profile.rows() if r.self_ns > 0}
    assert {"h.0.attn.c_attn", "h.1.mlp.c_proj", "h.0.attn", "lm_head"} <= timed
    for node in profile.tree():
        node.self_check(tolerance_ns=1e-6)


def test_fused_rows_are_marked_and_layernorms_carry_estimates(
    gpt_run: tuple[TinyGPT, Profile],
) -> None:
    _, profile = gpt_run
    c = profile.compiled
    assert c is not None
    for path in ("h.0.attn.c_attn", "h.0.mlp.c_fc", "lm_head"):
        assert c.estimated_share(path) == 0.0  # extern matmuls: exact
    # the residual add of block 0 is fused into block 1's first LayerNorm
    assert c.estimated_share("h.1.ln_1") > 0
    text = profile.render("console")
    assert isinstance(text, str)
    assert "ln_1 *" in text and "c_attn *" not in text
    assert "<compiled overhead>" in text and "part of the layer's time is a fused kernel" in text


def test_profile_saves_renders_and_diffs(gpt_run: tuple[TinyGPT, Profile], tmp_path: Path) -> None:
    model, compiled = gpt_run
    compiled.save(tmp_path / "c.json")
    loaded = Profile.load(tmp_path / "c.json")
    assert loaded.compiled == compiled.compiled
    for fmt in ("csv", "html"):
        assert compiled.render(fmt)
    eager = layerprof.profile(model, ids(), warmup=1, iters=3, threads=1)
    d = layerprof.diff(eager, loaded)
    compared = {row.path for row in d.layers}
    assert {"h.0.attn.c_attn", "h.1.mlp.c_fc", "lm_head"} <= compared


def test_compiled_runs_carry_the_eager_flop_count(gpt_run: tuple[TinyGPT, Profile]) -> None:
    from layerprof.capture.flops.counter import count_flops

    model, compiled = gpt_run
    assert compiled.flops is not None and compiled.flops.coverage is not None
    head = compiled.row("lm_head")
    assert head.flops and head.flop_detail is not None and head.flop_detail.bytes > 0
    with torch.inference_mode():
        eager = count_flops(model, lambda: model(ids()))
    assert compiled.flops.forward == eager.summary.forward
    assert Profile.from_dict(compiled.to_dict()).flops == compiled.flops


def test_the_model_is_left_as_it_was(gpt_run: tuple[TinyGPT, Profile]) -> None:
    model, _ = gpt_run
    assert not model.training
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks
        assert m._compiled_call_impl is None


# ---- a model the user compiled --------------------------------------------------------


def test_an_already_compiled_model_is_compiled_again(gpt_run: tuple[TinyGPT, Profile]) -> None:
    model = gpt()
    user = torch.compile(model)  # never called: layerprof compiles its own way
    profile = run(user, ids())
    c = profile.compiled
    assert c is not None and c.recompiled and c.regions == ("",)
    (again,) = [n for n in profile.notes if n.kind == "recompiled-for-attribution"]
    assert again.data["regions"] == ("",)
    assert profile.meta.model == "TinyGPT"
    assert user._orig_mod is model and model._compiled_call_impl is None


# ---- graph breaks, recompiles, dynamic shapes -----------------------------------------


class BreakingMLP(nn.Module):
    """A pre-norm MLP block with a graph break in the middle."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(self.ln(x)))
        torch._dynamo.graph_break()
        return x + self.fc2(h)


class Scale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


class ShrinkingNet(nn.Module):
    """The breaks sit in a loop, so Dynamo compiles ``BreakingMLP.forward`` on its own,
    once for both blocks; ``scale`` runs on the whole sequence twice, then on half of
    it: a recompile, with the length dynamic."""

    def __init__(self, dim: int = 128) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(BreakingMLP(dim) for _ in range(2))
        self.scale = Scale(dim)
        self.head = nn.Linear(dim, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = self.scale(block(x))
        return self.head(self.scale(x[:, : x.shape[1] // 2]))


@pytest.fixture(scope="module")
def shrinking() -> Profile:
    torch.manual_seed(0)
    return run(ShrinkingNet().eval(), torch.randn(8, 64, 128))


def test_graph_breaks_keep_absolute_paths(shrinking: Profile) -> None:
    c = shrinking.compiled
    assert c is not None
    assert any("graph_break" in b.reason for b in c.breaks)
    for path in ("blocks.0.ln", "blocks.0.fc1", "blocks.1.fc1", "blocks.0.act", "blocks.1.fc2"):
        assert shrinking.samples[path].self_ns.median > 0, path
    assert not c.unmatched
    assert shrinking.samples[OUTSIDE_ROW].self_ns.median > 0  # the eager loop and head


def test_recompiles_and_dynamic_shapes_get_a_record_per_graph(shrinking: Profile) -> None:
    c = shrinking.compiled
    assert c is not None
    assert c.recompiles and all(r.reason for r in c.recompiles)
    scale = sorted((g for g in c.graphs if g.frame.startswith("forward") and g.sites == 1),
                   key=lambda g: g.compile_id)  # fmt: skip
    # Scale.forward: compiled for the whole sequence (called twice), then again,
    # dynamic, for the half: two records, two keys, one frame
    assert [g.calls for g in scale] == [2.0, 1.0]
    assert len({g.compile_id.split("/")[0] for g in scale}) == 1
    assert len({g.key for g in c.graphs}) == len(c.graphs)
    blocks = [g for g in c.graphs if g not in scale]
    assert blocks and all(g.calls == 2.0 for g in blocks)  # one graph serves both blocks
    assert shrinking.samples["scale"].self_ns.median > 0


# ---- regional compilation -------------------------------------------------------------


class StackedMLP(BreakingMLP):
    """BreakingMLP with a code object of its own: Dynamo's caches are per code object,
    and ShrinkingNet's recompiles must not decide which of them runs here (inductor's
    cache still serves the same graphs)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(self.ln(x)))
        torch._dynamo.graph_break()
        return x + self.fc2(h)


class StackNet(nn.Module):
    """Two identical blocks (each with a graph break), the user's regions."""

    def __init__(self, dim: int = 128) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(StackedMLP(dim) for _ in range(2))
        self.head = nn.Linear(dim, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_regional_compilation_keeps_the_users_regions(shrinking: Profile) -> None:
    torch.manual_seed(0)
    model = StackNet().eval()
    for block in model.blocks:
        block.compile()
    theirs = [b._compiled_call_impl for b in model.blocks]
    profile = run(model, torch.randn(8, 64, 128))
    c = profile.compiled
    assert c is not None and c.regions == ("blocks.0", "blocks.1") and c.recompiled
    # the blocks' graphs are structurally equal: one record per cache key serves both
    # blocks, and each call's time goes under its own block's paths
    assert c.graphs and all(g.calls == 2.0 for g in c.graphs)
    for path in ("blocks.0.fc1", "blocks.1.fc1", "blocks.0.ln", "blocks.1.fc2"):
        assert profile.samples[path].self_ns.median > 0, path
    assert profile.samples["head"].self_ns.median == 0  # eager: outside the regions
    assert [b._compiled_call_impl for b in model.blocks] == theirs


# ---- a torchvision-style CNN ------------------------------------------------------------


def test_cnn_convolutions_are_attributed_exactly() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        BasicBlock(16, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    ).eval()  # fmt: skip
    profile = run(model, torch.randn(4, 3, 32, 32))
    c = profile.compiled
    assert c is not None and not c.unmatched
    convs = [k for k in c.kernels if k.extern and "conv" in k.name]
    assert convs and all(not k.estimated for k in convs)
    for path in ("0", "3.conv1", "3.conv2", "6"):
        assert profile.samples[path].self_ns.median > 0, path
    assert share_on_a_quiet_run(model, (torch.randn(4, 3, 32, 32),), profile) > 0.5


def share_on_a_quiet_run(
    model: nn.Module,
    args: tuple[Any, ...],
    profile: Profile,
    *,
    backward: bool = False,
    **options: Any,
) -> float:
    """The compiled regions' attributed share (forward or backward), measured again up to
    twice while it is at or below one half: forwards of ~1 ms give the mean little room,
    and a stall of a few ms in a region's wrapper (not in a kernel) halves the share
    (0.25-0.48 seen under load, 0.8-0.86 quiet). The same model finds its compiled code."""
    share = 0.0
    for _attempt in range(3):
        c = profile.compiled
        assert c is not None
        cov = c.backward if backward else c.coverage
        assert cov is not None
        share = cov.attributed_share
        if share > 0.5:
            break
        profile = run(model, *args, backward=backward, **options)
    return share


# ---- failures ------------------------------------------------------------------------


@torch.library.custom_op("layerprof_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("no fake kernel for twice")


class Uncompilable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return twice(self.fc(x))


def test_a_model_that_fails_to_compile_gets_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    out = tmp_path / "p.json"
    argv = ["run", "--arch", "tests.capture.compiled.test_compiled:Uncompilable", "--input", "2x4",
            "--warmup", "0", "--iters", "1", "--compile", "--json", str(out)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[0].startswith("layerprof: error: torch.compile failed on Uncompilable:")
    assert "no fake kernel for twice" in lines[0] and "Traceback" not in err
    assert len(lines) == 2 and lines[1].startswith("  hint: --debug")
    assert not out.exists()
    with pytest.raises(layerprof.LayerprofError):
        main(["--debug", *argv])
    model = Uncompilable()
    for m in model.modules():
        assert m._compiled_call_impl is None


def test_cuda_graph_modes_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--arch", "tests.capture.compiled.test_compiled:Uncompilable", "--input", "2x4", "--compile",
            "--compile-mode", "reduce-overhead"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "max-autotune-no-cudagraphs" in err and "Traceback" not in err
    assert main(["run", "--arch", "x:y", "--input", "2x4", "--compile-split", "lca"]) == 2
    assert "--compile-split needs --compile" in capsys.readouterr().err


# ---- the command line ------------------------------------------------------------------


def test_cli_run_compile_writes_json_csv_and_trace(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    gpt_run: tuple[TinyGPT, Profile],
) -> None:  # fmt: skip
    monkeypatch.chdir(ROOT)
    argv = ["run", "--arch", "tests.support.real_models:TinyGPT",
            "--arch-kwargs", '{"vocab": 256, "dim": 128, "heads": 4, "depth": 2}',
            "--input", "8x64:int64[0,256)", "--warmup", "1", "--iters", "3", "--threads", "1",
            "--compile", "--compile-split", "lca", "--json", str(tmp_path / "p.json"),
            "--csv", str(tmp_path / "p.csv"), "--trace", str(tmp_path / "t.json.gz")]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "<compiled overhead>" in out and "mode default, split lca" in out
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["compiled"]["split"] == "lca" and data["compiled"]["coverage"]["forward_ms"] > 0
    assert any(r["path"] == OVERHEAD_ROW for r in data["layers"])
    assert OVERHEAD_ROW in (tmp_path / "p.csv").read_text()
    assert main(["analyze", str(tmp_path / "t.json.gz"), "-q"]) == 0


# ---- backward, with dynamic shapes ------------------------------------------------------


def test_backward_kernels_go_to_the_forward_layers() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 128))
    x = torch.randn(64, 128)
    profile = run(model, x, backward=True,
                  compile=CompileOptions(dynamic=True, split="equal"))  # fmt: skip
    c = profile.compiled
    assert c is not None and c.backward is not None
    assert c.dynamic is True and c.split == "equal"
    assert {g.phase for g in c.graphs} == {"forward", "backward"}
    for path in ("0", "1", "2"):
        s = profile.samples[path]
        assert s.self_ns.median > 0, path
        assert s.backward_self_ns is not None and s.backward_self_ns.median > 0, path
    options = {"compile": CompileOptions(dynamic=True, split="equal")}
    assert share_on_a_quiet_run(model, (x,), profile, backward=True, **options) > 0.5
    # this torch's backward mapping passes the trust check (compiled_section.backward_problem)
    assert not [n for n in profile.notes if n.kind == "backward-not-split"]
    # the backward pass turns autograd on, which fails a guard: that recompile is ours,
    # and the findings say so instead of telling the user to fix their shapes
    titles = [f.title for f in diagnose(profile)]
    assert not [t for t in titles if t.endswith("recompilation(s) during the run")], titles
    if c.recompiles:
        assert all(r.autograd_switch for r in c.recompiles), c.recompiles
        assert [t for t in titles if t.endswith("when the backward pass turned autograd on")]
    assert model.training
    assert all(p.grad is None for p in model.parameters())


class ItemBreak(nn.Module):
    """A graph break Dynamo logs as a warning: ``Tensor.item()`` in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        if x.sum().item() > 1e9:
            x = x * 2
        return self.b(torch.relu(x))


def test_graph_break_warnings_are_not_logged_and_the_level_comes_back() -> None:
    """Dynamo's ~20 WARNING lines per graph break stay out of the report (the compiled
    section names each break); the logger's level is the user's again afterwards."""
    import logging

    class Keep(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    dynamo = logging.getLogger("torch._dynamo")  # torch's loggers do not propagate to root
    before, kept = dynamo.level, Keep()
    dynamo.addHandler(kept)
    try:
        run(ItemBreak().eval(), torch.randn(4, 16))
    finally:
        dynamo.removeHandler(kept)
    assert not [m for m in kept.messages if "Graph break" in m]
    assert dynamo.level == before


@pytest.mark.parametrize(
    ("reason", "ours"),
    [
        ("0/0: GLOBAL_STATE changed: grad_mode", True),
        (
            "0/0: tensor 'args[0]' dispatch key set mismatch. expected DispatchKeySet(CPU,"
            " BackendSelect, ADInplaceOrView), actual DispatchKeySet(CPU, BackendSelect,"
            " ADInplaceOrView, AutogradCPU)",
            True,
        ),
        ("0/0: tensor 'args[0]' size mismatch at index 0. expected 8, actual 4", False),
        ("0/0: tensor 'args[0]' dispatch key set mismatch. expected (CPU), actual (CUDA)", False),
    ],
)
def test_recompiles_of_autograd_state_are_told_apart(reason: str, ours: bool) -> None:
    """The reasons torch 2.13 gives when inference mode or grad mode changes between calls
    (read from get_compilation_metrics), and two that a model causes itself."""
    assert Recompile("0/1", "forward (net.py:1)", reason).autograd_switch is ours


def test_a_second_model_of_the_same_class_is_not_a_recompile() -> None:
    """Two Sequentials profiled in one process (a notebook): each compiles its own
    frame, so the second's first compile is not reported as a recompile of the first's;
    the same model profiled again finds its compiled code."""
    torch.manual_seed(0)
    first, second = (nn.Sequential(nn.Linear(16, 16), nn.ReLU()) for _ in range(2))
    run(first, torch.randn(4, 16))
    again = run(second, torch.randn(8, 16))
    assert again.compiled is not None and again.compiled.recompiles == ()
    assert again.compiled.compile_ns > 0
    repeat = run(second, torch.randn(8, 16))
    assert repeat.compiled is not None and repeat.compiled.recompiles == ()
