"""The Python API as a user meets it (11.7): explicit units, objects that render
themselves, the files the CLI writes, and device/dtype like ``--device/--dtype``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from torch import nn

import layerprof
from layerprof.analysis.gate import gate
from layerprof.cli import main
from layerprof.errors import LayerprofError, UsageError
from tests.support.cli_models import Net
from tests.support.real_models import ResNetish


@pytest.fixture(scope="module")
def prof() -> layerprof.Profile:
    return layerprof.profile(Net(), torch.randn(2, 4), warmup=1, iters=5, ops=True)


def test_units_are_explicit_and_agree_with_json(prof: layerprof.Profile) -> None:
    lat = prof.latency
    assert lat is not None
    assert lat.median_ns == lat.median  # the fields are ns...
    assert lat.median_ms == pytest.approx(lat.median / 1e6)  # ...and say how to get ms
    data = prof.to_dict()
    assert data["latency_ms"]["median"] == pytest.approx(lat.median_ms)
    assert data["latency_ms"]["p90"] == pytest.approx(lat.p90_ms)
    assert lat.ci_ms == pytest.approx((data["latency_ms"]["ci_low"], data["latency_ms"]["ci_high"]))
    assert lat.ms()["median"] == pytest.approx(lat.median_ms)
    json_layers = {row["path"]: row for row in data["layers"]}
    for row in prof.rows():
        assert json_layers[row.path]["total_ms"] == pytest.approx(row.total_ms)
        assert json_layers[row.path]["self_ms"] == pytest.approx(row.self_ms)


def test_profile_and_diff_render_themselves(prof: layerprof.Profile) -> None:
    text = repr(prof)
    assert text.startswith("<Profile Net on cpu: latency median ") and "\n" not in text
    assert len(text) < 200
    assert "fc1" in str(prof) and "findings" in str(prof)  # print(prof): the report
    d = layerprof.diff(prof, prof)
    assert repr(d).startswith("<Diff Net -> Net: ") and "\n" not in repr(d)
    report = str(d)  # print(d): the console report
    assert "no change beyond noise" in report and "Layers (self time, host)" in report
    assert d.to_markdown().startswith("### ") and d.headline() in d.to_markdown()
    saved = d.to_dict()
    assert saved["schema"].startswith("layerprof.diff/")


def test_a_diff_is_gated_by_the_public_gate_function(
    prof: layerprof.Profile, capsys: pytest.CaptureFixture[str]
) -> None:
    """The gate is ``layerprof.gate(diff, pct, metric)``, beside the value, not a method of it."""
    d = layerprof.diff(prof, prof)
    assert layerprof.gate is gate and not hasattr(d, "gate")
    result = layerprof.gate(d, 5.0, "layers")
    assert not result.failed and result.metric == "layers" and result.fail_above_pct == 5.0
    assert result.message.startswith("pass: no regression beyond noise above 5 % in layers")
    assert d.to_dict(gate=result)["gate"] == result.to_dict()
    d.print(gate=result)
    assert result.message in " ".join(capsys.readouterr().out.split())
    with pytest.raises(UsageError, match="unknown gate metric"):
        layerprof.gate(d, 5.0, "kernels")  # type: ignore[arg-type]


def test_a_profile_writes_what_the_cli_writes(
    prof: layerprof.Profile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = {
        name: prof.write(tmp_path / name)
        for name in ("p.html", "p.csv", "t.json.gz", "s.folded", "s.speedscope.json", "p.json")
    }
    assert "<html" in written["p.html"].read_text()[:500].lower()
    trace = json.loads(gzip.decompress(written["t.json.gz"].read_bytes()))
    assert any(e.get("name", "").startswith("aten::") for e in trace["traceEvents"])
    assert prof.write(tmp_path / "t.json", fmt="trace").read_bytes().startswith(b"{")
    tb = layerprof.write_tensorboard(prof, tmp_path / "tb")
    assert tb.name.endswith(".pt.trace.json") and tb.parent == tmp_path / "tb"
    assert layerprof.Profile.load(written["p.json"]).meta.model == "Net"
    # the CLI re-rendering the same saved profile writes the same CSV
    monkeypatch.chdir(tmp_path)
    assert main(["report", "p.json", "--csv", "cli.csv", "--quiet"]) == 0
    assert (tmp_path / "cli.csv").read_text() == written["p.csv"].read_text()


def test_dtype_profiles_a_cast_copy_and_leaves_the_model() -> None:
    model = ResNetish()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prof = layerprof.profile(
        model, torch.randn(1, 3, 32, 32), warmup=0, iters=2, dtype=torch.float64
    )
    assert prof.meta.dtype == "float64"
    assert prof.row("").calls == 1 and prof.row("layer1").calls == 1
    state = model.state_dict()
    assert all(torch.equal(state[k], v) and state[k].dtype == v.dtype for k, v in before.items())
    assert model.training  # eval mode was restored too
    again = layerprof.profile(model, torch.randn(1, 3, 32, 32), warmup=0, iters=2, dtype="float32")
    assert again.meta.dtype == "float32"


def test_device_and_dtype_errors_are_clear() -> None:
    with pytest.raises(UsageError, match="not a floating dtype"):
        layerprof.profile(nn.Linear(2, 2), torch.zeros(1, 2), dtype=torch.int64)
    with pytest.raises(UsageError, match="expected cpu, cuda or cuda:N"):
        layerprof.profile(nn.Linear(2, 2), torch.zeros(1, 2), device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(LayerprofError, match="CUDA is not available"):
            layerprof.profile(nn.Linear(2, 2), torch.zeros(1, 2), device="cuda")
    prof = layerprof.profile(nn.Linear(2, 2), torch.zeros(1, 2), device="cpu", warmup=0, iters=1)
    assert prof.meta.device == "cpu"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_cuda_moves_a_copy() -> None:
    model = Net()
    prof = layerprof.profile(model, torch.randn(2, 4), device="cuda", warmup=1, iters=3)
    assert prof.meta.device.startswith("cuda")
    assert next(model.parameters()).device.type == "cpu"


def test_render_gives_text_for_every_text_format(prof: layerprof.Profile) -> None:
    for fmt in ("console", "json", "csv", "html", "folded", "speedscope"):
        assert isinstance(prof.render(fmt), str), fmt


def test_op_rows_and_backward_say_ms_as_the_json_does(
    prof: layerprof.Profile, tmp_path: Path
) -> None:
    """Issue 22.8: OpStat had self_ns but no self_ms, LayerRow no backward_*_ms, and a
    Profile had no op(name) beside row(path)."""
    data = prof.to_dict()
    for saved, op in zip(data["ops"], prof.ops, strict=True):
        assert saved["self_ms"] == pytest.approx(op.self_ms)
        assert saved["total_ms"] == pytest.approx(op.total_ms)
        assert op.device_ms is None  # CPU: no device time, never 0
    # op(name): one layer's row, or summed over the layers that ran it
    fc1 = prof.op("aten::addmm", layer="fc1")
    assert fc1.layer == "fc1" and fc1.calls == 1
    both = prof.op("aten::addmm")
    rows = [o for o in prof.ops if o.name == "aten::addmm" and o.phase == "forward"]
    assert len(rows) == 2 and both.layer is None
    assert both.self_ns == pytest.approx(sum(o.self_ns for o in rows))
    assert both.calls == sum(o.calls for o in rows)
    with pytest.raises(KeyError):
        prof.op("aten::no_such_op")
    trained = layerprof.profile(Net(), torch.randn(2, 4), warmup=0, iters=2, backward=True)
    saved_rows = {r["path"]: r for r in trained.to_dict()["layers"]}
    for row in trained.rows():
        assert row.backward_total_ms is not None and row.backward_self_ms is not None
        assert saved_rows[row.path]["backward_total_ms"] == pytest.approx(row.backward_total_ms)
        assert saved_rows[row.path]["backward_self_ms"] == pytest.approx(row.backward_self_ms)
    assert prof.rows()[0].backward_total_ms is None  # no --backward


def test_print_in_a_pipe_is_as_wide_as_print_method(
    prof: layerprof.Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22.8: print(prof) in a pipe laid the report out for 80 columns, .print() for
    160 (the CLI's pipe width); both now follow the CLI's console."""
    monkeypatch.delenv("COLUMNS", raising=False)
    assert str(prof) == prof.render("console", width=160)
    monkeypatch.setenv("COLUMNS", "100")
    assert str(prof) == prof.render("console", width=100)


def test_explicit_train_mode_is_no_finding() -> None:
    """Issue 22.8: --train (eval=False) is what the user asked for, not a finding."""
    from layerprof.analysis.diagnose import diagnose

    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))
    trained = layerprof.profile(model, torch.randn(2, 4), warmup=0, iters=2, eval=False)
    assert trained.meta.mode == "train"
    assert not [f for f in diagnose(trained) if "train mode" in f.title]
