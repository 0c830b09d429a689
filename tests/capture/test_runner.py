"""The whole measurement on real (small) models."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import layerprof
from layerprof.capture.options import RunOptions
from layerprof.capture.recording.calibration import calibrate
from layerprof.capture.runner import profile_model
from layerprof.errors import ModelRunError
from layerprof.pivot.profile import Profile
from tests.support import zoo_models as zoo


def small_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))


def test_profile_has_latency_overhead_and_rows() -> None:
    model = small_mlp()
    prof = layerprof.profile(model, torch.randn(4, 32), warmup=2, iters=7)
    lat = prof.latency
    assert lat is not None and lat.n == 7
    assert lat.min <= lat.median <= lat.p90 <= lat.p99 <= lat.max
    assert prof.first_ns is not None and prof.first_ns > 0
    assert prof.overhead is not None and prof.overhead.calls_per_forward == 4
    # measured, or (a busy machine read 0 twice) left uncorrected and said
    unmeasured = [n for n in prof.notes if n.kind == "overhead-unmeasured"]
    assert prof.overhead.per_call_ns > 0 or (unmeasured and not prof.overhead.corrected)
    rows = {r.path: r for r in prof.rows()}
    assert set(rows) == {"", "0", "1", "2"}
    assert rows["0"].params == 32 * 64 + 64
    assert rows["0"].input_shapes == [[4, 32]] and rows["0"].output_shapes == [4, 64]
    assert all(len(s.total_ns) == 7 for s in prof.samples.values())
    for root in prof.tree():
        # medians of per-iteration values: exact per iteration, within noise for medians
        root.self_check(tolerance_ns=0.05 * root.row.total_ns + 2_000)


def test_mode_threads_and_hooks_restored() -> None:
    model = small_mlp().train()
    threads = torch.get_num_threads()
    layerprof.profile(model, torch.randn(2, 32), warmup=0, iters=2, threads=1)
    assert model.training
    assert torch.get_num_threads() == threads
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_eval_mode_during_run() -> None:
    seen: list[bool] = []

    class Spy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(self.training)
            return x

    layerprof.profile(Spy().train(), torch.zeros(1), warmup=0, iters=1)
    assert seen and not any(seen)


def test_model_error_names_layer_and_leaves_no_hooks() -> None:
    model = zoo.Raises().train()
    with pytest.raises(ModelRunError) as info:
        layerprof.profile(model, torch.zeros(2, 4), warmup=0, iters=1)
    assert info.value.layer == "block2.1"
    # (torch 2.15 names the op first: "addmm: mat1 and mat2 ...")
    assert re.match(
        r"block2\.1 \(Linear\): (addmm: )?mat1 and mat2 shapes cannot be multiplied",
        str(info.value),
    )
    assert model.training
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_token_ids_beyond_the_embedding_name_its_size() -> None:
    """``--input 1x8:int64[0,1000)`` into a 100-token embedding said only 'index out of
    range in self', with no hint (the words of a shape error were not in it): the hint
    names the embedding's rows and the --input range that fits them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(100, 8), nn.Linear(8, 4))
    with pytest.raises(ModelRunError) as info:
        layerprof.profile(model, torch.tensor([[3, 250, 7]]), warmup=0, iters=1)
    assert info.value.layer == "0"
    assert str(info.value).startswith("0 (Embedding): index out of range"), str(info.value)
    assert info.value.hint is not None
    assert "100 rows" in info.value.hint, info.value.hint
    assert "int64[0,100)" in info.value.hint, info.value.hint


def test_latency_only_for_unhookable_models() -> None:
    scripted = torch.jit.script(small_mlp())
    prof = profile_model(
        scripted, (torch.randn(2, 32),), None, RunOptions(warmup=0, iters=3, layers=False)
    )
    assert prof.latency is not None and prof.latency.n == 3
    assert [r.path for r in prof.rows()] == [""]


# calibrate() takes medians of real timings: on a loaded machine its figures can read 0
# (issue 43), so this runs in the slow set; the default set checks what a 0 does
# (test_a_calibration_that_reads_zero_twice_corrects_nothing_and_says_so).
@pytest.mark.slow
def test_calibration_is_positive_and_inside_part_smaller() -> None:
    c = calibrate("cpu", children=10, repeats=10)
    assert c.per_call_ns > 0
    assert 0 <= c.inside_ns <= c.per_call_ns


def test_save_load_round_trip(tmp_path) -> None:
    prof = layerprof.profile(small_mlp(), torch.randn(2, 32), warmup=0, iters=3)
    path = prof.save(tmp_path / "p.json")
    again = Profile.load(path)
    assert again.to_dict() == prof.to_dict() or _close(again, prof)
    assert again.meta.inputs == prof.meta.inputs
    df = again.to_dataframe()
    assert list(df["path"]) == ["", "0", "1", "2"]


def _close(a: Profile, b: Profile) -> bool:
    ra, rb = a.rows(), b.rows()
    return all(
        x.path == y.path and x.total_ns == pytest.approx(y.total_ns, abs=1)
        for x, y in zip(ra, rb, strict=True)
    )


def test_recorder_with_user_loop() -> None:
    model = small_mlp()
    with layerprof.Recorder(model) as rec:
        for _ in range(3):
            model(torch.randn(2, 32))
    prof = rec.profile()
    assert prof.row("").calls == 1
    assert len(prof.samples["0"].total_ns) == 3


#: A calibration of known figures (ns): the real one can read 0 on a loaded machine
#: (issue 43), which its own tests cover; these check what is done with its figures.
KNOWN_PER_CALL, KNOWN_INSIDE = 300.0, 100.0


@pytest.fixture
def known_calibration(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from layerprof.capture.recording import calibration as calibration_module
    from layerprof.capture.recording.layertimes import Correction

    calls: list[str] = []

    def known(device: str = "cpu") -> Correction:
        calls.append(device)
        return Correction(per_call_ns=KNOWN_PER_CALL, inside_ns=KNOWN_INSIDE)

    monkeypatch.setattr(calibration_module, "calibrate", known)
    return calls


def test_recorder_profile_reports_and_corrects_overhead(known_calibration: list[str]) -> None:
    model = small_mlp()
    with layerprof.Recorder(model) as rec:
        for _ in range(3):
            model(torch.randn(2, 32))
    corrected, raw = rec.profile(), rec.profile(correct=False)
    assert known_calibration == ["cpu"]
    assert corrected.overhead is not None and corrected.overhead.per_call_ns == KNOWN_PER_CALL
    assert raw.overhead is None
    assert corrected.row("").self_ns <= raw.row("").self_ns


def test_no_correct_still_reports_overhead(known_calibration: list[str]) -> None:
    prof = layerprof.profile(
        small_mlp(), torch.randn(2, 32), warmup=0, iters=3, correct_overhead=False
    )
    assert known_calibration == ["cpu"]
    assert prof.overhead is not None and not prof.overhead.corrected
    assert prof.overhead.per_call_ns == KNOWN_PER_CALL


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_device_times() -> None:
    model = small_mlp().cuda()
    prof = layerprof.profile(model, torch.randn(64, 32, device="cuda"), warmup=2, iters=5)
    assert prof.meta.device.startswith("cuda")
    rows = {r.path: r for r in prof.rows()}
    assert rows["0"].device_total_ns is not None and rows["0"].device_total_ns > 0
    for root in prof.tree():
        root.self_check(tolerance_ns=1)


@pytest.mark.parametrize(
    "patch",
    [
        {"latency_ms": [1]},
        {"layers": {}},
        {"meta": {"model": "m", "device": None}},
        {"ops": "x"},
        {"layers": [{"path": ""}]},
    ],
)
def test_malformed_profile_is_a_format_error(tmp_path, patch: dict) -> None:
    from layerprof.errors import ProfileFormatError
    from tests.support.profiles import fake_profile

    data = {**fake_profile().to_dict(), **patch}
    with pytest.raises(
        ProfileFormatError, match=r"^x\.json: profile\.(latency_ms|layers|meta|ops)"
    ):
        Profile.from_dict(data, source="x.json")


def test_flops_and_activation_bytes_per_layer(tmp_path) -> None:
    prof = layerprof.profile(small_mlp(), torch.randn(4, 32), warmup=0, iters=2)
    rows = {r.path: r for r in prof.rows()}
    assert rows["0"].flops == 2 * 4 * 32 * 64
    assert rows["2"].flops == 2 * 4 * 64 * 8
    # ReLU: elementwise, one per element, counted and labelled as such
    assert rows["1"].flops == rows["1"].flop_detail.elementwise == 4 * 64
    assert rows[""].flops == rows["0"].flops + rows["1"].flops + rows["2"].flops
    assert rows["0"].output_bytes == 4 * 64 * 4
    again = Profile.load(prof.save(tmp_path / "p.json"))
    assert again.row("0").flops == rows["0"].flops
    assert again.row("0").output_bytes == rows["0"].output_bytes


class _WithScripted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.block = torch.jit.script(nn.Sequential(nn.Linear(8, 8), nn.ReLU()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.pre(x))


@pytest.mark.parametrize("ops", [False, True])
def test_scripted_submodule_is_an_opaque_leaf(ops: bool) -> None:
    from layerprof.capture.options import OpOptions

    model = _WithScripted()
    prof = profile_model(
        model,
        (torch.randn(2, 8),),
        None,
        RunOptions(warmup=0, iters=2, ops=OpOptions() if ops else None),
    )
    paths = [r.path for r in prof.rows()]
    assert paths == ["", "pre", "block"]  # the scripted block's insides are not listed
    assert prof.row("pre").calls == 1
    assert any(n.kind == "torchscript-submodule" and n.data["path"] == "block" for n in prof.notes)
    for root in prof.tree():
        root.self_check(tolerance_ns=1)


def test_compiled_submodule_is_timed_as_one_leaf() -> None:
    class WithCompiled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pre = nn.Linear(8, 8)
            self.block = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), backend="eager")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.block(self.pre(x))

    prof = layerprof.profile(WithCompiled(), torch.randn(2, 8), warmup=1, iters=3)
    assert [r.path for r in prof.rows()] == ["", "pre", "block"]
    assert prof.row("block").calls == 1 and prof.row("block").total_ns > 0


def test_python_api_ops_and_backward() -> None:
    prof = layerprof.profile(
        small_mlp(), torch.randn(4, 32), warmup=0, iters=2, ops=True, backward=True
    )
    assert any(o.layer == "0" and o.name == "aten::addmm" for o in prof.ops)
    assert prof.row("0").backward_total_ns is not None
    hooks = layerprof.profile(small_mlp(), torch.randn(4, 32), warmup=0, iters=2, backward=True)
    assert hooks.row("0").backward_total_ns is not None and not hooks.ops


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_ops_and_backward() -> None:
    model = small_mlp().cuda()
    prof = layerprof.profile(
        model, torch.randn(64, 32, device="cuda"), iters=3, ops=True, backward=True
    )
    assert any(o.device_ns for o in prof.ops if o.layer == "0")
    hooks = layerprof.profile(model, torch.randn(64, 32, device="cuda"), iters=3, backward=True)
    assert hooks.row("0").backward_total_ns is not None


def test_flops_of_never_called_containers_are_their_childrens() -> None:
    from layerprof.load.demo import build

    prof = layerprof.profile(
        build("transformer"), torch.randint(0, 1000, (2, 8)), warmup=0, iters=1
    )
    assert prof.row("layers").flops == prof.row("layers.0").flops + prof.row("layers.1").flops > 0


def test_each_run_is_measured_by_the_mode_its_options_choose() -> None:
    """The runner asks the modes in order (layerprof.capture.modes); no if/elif decides."""
    from layerprof.capture.compiled.mode import CompiledMode
    from layerprof.capture.hooks.mode import HooksMode
    from layerprof.capture.modes import MODES, choose
    from layerprof.capture.ops.mode import OpsMode
    from layerprof.capture.options import CompileOptions, OpOptions
    from layerprof.capture.scripted.mode import ScriptedMode

    model = torch.nn.Linear(2, 2)
    cases = {
        HooksMode: RunOptions(),
        OpsMode: RunOptions(ops=OpOptions()),
        ScriptedMode: RunOptions(kind="torchscript"),
        CompiledMode: RunOptions(compile=CompileOptions()),
    }
    for kind, opts in cases.items():
        assert next(m for m in MODES if m.wants(opts)) is kind
    assert isinstance(choose(model, (), {}, RunOptions(ops=OpOptions())), OpsMode)
    assert isinstance(choose(model, (), {}, RunOptions(kind="export")), ScriptedMode)


def test_a_calibration_that_reads_zero_twice_corrects_nothing_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """layerprof run's calibration read 0 on a busy machine (torch 2.11 suite, a loaded
    run) and the profile claimed "corrected" with 0 per call; as the Recorder does, it is
    measured again once, then the times are left uncorrected and a note says why."""
    from layerprof.capture.recording import calibration as calibration_module
    from layerprof.capture.recording.layertimes import Correction

    tries: list[str] = []

    def zero(device: str = "cpu") -> Correction:
        tries.append(device)
        return Correction(per_call_ns=0.0, inside_ns=0.0)

    monkeypatch.setattr(calibration_module, "calibrate", zero)
    prof = layerprof.profile(small_mlp(), torch.randn(4, 32), warmup=1, iters=3)
    assert tries == ["cpu", "cpu"]
    assert prof.overhead is not None and not prof.overhead.corrected
    assert "overhead-unmeasured" in [n.kind for n in prof.notes]
    assert "0.0 µs per" not in str(prof.render("console"))
