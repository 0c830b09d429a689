"""``layerprof sweep``: the grid, out-of-memory stops, the batch dimension, the codec,
the console table and the command line."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console
from torch import nn

from layerprof import codec, sinks
from layerprof.capture.sweep import SweepOptions, is_out_of_memory, run_sweep
from layerprof.cli import main
from layerprof.errors import ModelRunError, ProfileFormatError, UsageError
from layerprof.pivot.sections.sweep import Sweep
from tests.support.golden_files import check_golden
from tests.support.paths import SUPPORT
from tests.support.profiles import synthetic

FAST = {"warmup": 0, "iters": 2, "memory": False}


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class OutOfMemoryAbove(nn.Module):
    """Runs out of memory (as CUDA's allocator says it) for batches above ``limit``."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.fc(x)


def test_grid_order_throughput_and_shares() -> None:
    sweep = run_sweep(
        Mlp(), ["2x16"],
        SweepOptions(batches=(4, 1), dtypes=("float32", "bfloat16"), threads=(1,), **FAST),
    )  # fmt: skip
    labels = [(p.batch, p.dtype, p.threads) for p in sweep.points]
    assert labels == [(1, "float32", 1), (4, "float32", 1), (1, "bfloat16", 1), (4, "bfloat16", 1)]
    for p in sweep.points:
        assert p.status == "ok" and p.latency is not None
        assert p.samples_per_s == pytest.approx(p.batch / p.latency.median * 1e9)
        assert p.shares and all(0 <= s <= 1 for _, s in p.shares)
        assert {path for path, _ in p.shares} >= {"fc1", "fc2"}
    one, four = sweep.points[0], sweep.points[1]
    assert one.flops is not None and four.flops == 4 * one.flops  # FLOPs scale with the batch
    assert sweep.inputs == ("2x16",) and sweep.batch_dim == 0


class UnfusedWhenWatched(nn.Module):
    """Turns torch's fused attention path off while its encoder layer's forward is wrapped
    (a model that branches on being watched, as some tracing-aware code does)."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        before = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(before and "forward" not in self.enc.__dict__)
        try:
            return self.enc(x)
        finally:
            torch.backends.mha.set_fastpath_enabled(before)


def test_notes_say_where_shares_time_the_unfused_path_and_the_machine_was_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # layerprof's wrappers keep an eval TransformerEncoderLayer on its fused path...
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    fused = run_sweep(layer, ["2x4x16"], SweepOptions(batches=(1,), **FAST))
    assert not [n for n in fused.notes if n.kind == "unfused-shares"]
    # ...but a model that leaves it when watched has its per-layer rows on the slow path
    quiet = run_sweep(UnfusedWhenWatched().eval(), ["2x4x16"], SweepOptions(batches=(1, 2), **FAST))
    (unfused,) = [n for n in quiet.notes if n.kind == "unfused-shares"]  # once, not per point
    assert unfused.data["layers"] == ("enc",)
    assert "did not take torch's fused fast path there" in unfused.text
    monkeypatch.setattr("layerprof.capture.runner.host_load", lambda: {"cpus": 2, "load_avg": 7.5})
    busy = run_sweep(Mlp(), ["2x16"], SweepOptions(batches=(1, 2), **FAST))
    (note,) = busy.notes
    assert note.kind == "busy-machine" and note.data == {"points": 2, "load": 7.5, "cpus": 2}
    assert note.text.startswith("the machine was busy at 2 of 2 points (batch 1, float32; batch 2,")
    monkeypatch.setattr("layerprof.capture.runner.host_load", lambda: {"cpus": 2, "load_avg": 1.0})
    assert run_sweep(Mlp(), ["2x16"], SweepOptions(batches=(1,), **FAST)).notes == ()


def test_the_callers_model_keeps_its_dtype_and_weights() -> None:
    model = Mlp()
    before = model.fc1.weight.detach().clone()
    run_sweep(model, ["2x16"], SweepOptions(dtypes=("bfloat16",), **FAST))
    assert model.fc1.weight.dtype == torch.float32
    assert torch.equal(model.fc1.weight.detach(), before)


def test_out_of_memory_stops_the_row_and_says_where() -> None:
    sweep = run_sweep(
        OutOfMemoryAbove(2), ["1x8"],
        SweepOptions(batches=(1, 2, 4, 8), dtypes=("float32", "float64"), **FAST),
    )  # fmt: skip
    statuses = [(p.batch, p.dtype, p.status) for p in sweep.points]
    assert statuses == [
        (1, "float32", "ok"), (2, "float32", "ok"), (4, "float32", "out of memory"),
        (8, "float32", "skipped"), (1, "float64", "ok"), (2, "float64", "ok"),
        (4, "float64", "out of memory"), (8, "float64", "skipped"),
    ]  # fmt: skip
    oom = sweep.points[2]
    assert "out of memory" in oom.reason.lower()
    assert sweep.points[3].reason == "batch 4, float32 ran out of memory"
    assert any(n.kind == "out-of-memory" and n.data["point"] == "batch 4, float32"
               and "batches 8 not tried" in n.text for n in sweep.notes)  # fmt: skip


def test_other_failures_mark_the_point_and_go_on() -> None:
    class Picky(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] == 3:
                raise ValueError("batch 3 is unlucky")
            return x * 2

    sweep = run_sweep(Picky(), ["1x4"], SweepOptions(batches=(1, 3, 5), **FAST))
    assert [p.status for p in sweep.points] == ["ok", "failed", "ok"]
    assert "batch 3 is unlucky" in sweep.points[1].reason


class SeqFirst(nn.Module):
    """An LSTM over (time, batch, features), and a small tensor with no batch in it."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0] * scale.mean()


def test_batch_dim_for_sequence_first_inputs() -> None:
    sweep = run_sweep(
        SeqFirst(), ["5x2x8", "scale=3"], SweepOptions(batches=(1, 3), batch_dim=1, **FAST)
    )
    assert [p.status for p in sweep.points] == ["ok", "ok"]
    first, second = sweep.points
    assert second.flops == pytest.approx(3 * first.flops, rel=0.01)  # the batch is dimension 1
    assert [n.data for n in sweep.notes if n.kind == "no-batch-dim"] == [
        {"input": "scale=3", "batch_dim": 1}
    ]


def test_file_inputs_cannot_be_resized(tmp_path: Path) -> None:
    path = tmp_path / "x.pt"
    torch.save(torch.randn(2, 16), path)
    with pytest.raises(UsageError, match="cannot be resized"):
        run_sweep(Mlp(), [f"@{path}"], SweepOptions(batches=(1, 2), **FAST))
    sweep = run_sweep(Mlp(), [f"@{path}"], SweepOptions(**FAST))  # not varied: fine
    assert sweep.points[0].status == "ok" and sweep.points[0].batch is None


def test_peak_memory_grows_with_the_batch() -> None:
    sweep = run_sweep(Mlp(), ["1x16"], SweepOptions(batches=(1, 256), warmup=0, iters=1))
    small, large = (p.peak_bytes for p in sweep.points)
    assert small is not None and large is not None and large > small > 0


@pytest.mark.parametrize(
    "exc,expected",
    [
        (torch.OutOfMemoryError("CUDA out of memory"), True),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1"), True),
        (MemoryError(), True),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), False),
        (ValueError("out of memory is not a ValueError's business"), False),
    ],
)
def test_is_out_of_memory(exc: BaseException, expected: bool) -> None:
    assert is_out_of_memory(exc) is expected
    wrapped = ModelRunError("fc (Linear): something")
    wrapped.__cause__ = exc
    assert is_out_of_memory(wrapped) is expected


# ---- codec and console -------------------------------------------------------------------


def test_codec_round_trip() -> None:
    data = codec.to_dict(synthetic())
    assert data["schema"] == "layerprof.sweep/1"
    again = codec.from_dict(json.loads(json.dumps(data)))
    assert isinstance(again, Sweep)
    assert codec.to_dict(again) == data
    assert again.points[1].shares == (("fc1", 0.7), ("fc2", 0.25))


@pytest.mark.parametrize(
    "patch,where",
    [({"points": "x"}, "sweep.points"), ({"model": 3}, "sweep.model")],
)
def test_malformed_sweep_names_the_field(patch: dict[str, Any], where: str) -> None:
    data = {**codec.to_dict(synthetic()), **patch}
    with pytest.raises(ProfileFormatError, match=where.replace(".", r"\.")):
        codec.from_dict(data, source="s.json")


def test_malformed_point_fields() -> None:
    data = codec.to_dict(synthetic())
    data["points"][0]["status"] = "great"
    with pytest.raises(ProfileFormatError, match="status"):
        codec.from_dict(data)
    data = codec.to_dict(synthetic())
    data["points"][0]["shares"] = [["fc1", 7]]
    with pytest.raises(ProfileFormatError, match="shares"):
        codec.from_dict(data)


def _console_text(sweep: Sweep, width: int = 120) -> str:
    buf = io.StringIO()
    sinks.show(sweep, console=Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


def test_console_golden() -> None:
    check_golden("sweep_console.txt", _console_text(synthetic()))


def test_console_keeps_numbers_at_80_columns() -> None:
    text = _console_text(synthetic(), 80)
    assert "2,000.0" in text and "out of memory" in text
    assert "lines wrap" not in text and "hidden columns: p90" in text  # p50, p99 stay
    assert "hidden columns" not in _console_text(synthetic(), 100)


def test_console_columns_only_for_dimensions_that_vary() -> None:
    one = synthetic()
    assert "peak memory (float32, 2 threads)" in _console_text(one)
    varied = replace(one, points=(*one.points, replace(one.points[0], dtype="bfloat16", threads=1)))
    header = next(ln for ln in _console_text(varied).splitlines() if "p50" in ln)
    assert header.split()[:3] == ["Batch", "Dtype", "Threads"]
    assert "peak memory (" not in _console_text(varied)


# ---- command line --------------------------------------------------------------------------


def test_cli_sweep_writes_json_and_report_rereads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(SUPPORT)
    out = tmp_path / "s.json"
    code = main([
        "sweep", "--arch", "cli_models:Net", "--input", "2x4", "--batch", "1,2",
        "--iters", "2", "--warmup", "0", "--no-memory", "--json", str(out),
    ])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr()
    assert "sweep 1/2: batch 1, float32" in printed.err and f"wrote {out}" in printed.err
    assert "latency (clean pass)" in printed.out
    saved = json.loads(out.read_text())
    assert [p["batch"] for p in saved["points"]] == [1, 2]
    assert main(["report", str(out)]) == 0
    assert "share of the forward by layer" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--batch", "1,x"], "argument --batch: 'x' is not an integer"),
        (["--batch", "0"], "argument --batch"),
        (["--batch", "2,2"], "a value is given twice"),
        (["--dtype", "float8"], "argument --dtype"),
        (["--threads", "1,"], "expected thread counts separated by commas"),
    ],
)
def test_cli_sweep_bad_arguments(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["sweep", "--arch", "m:N", "--input", "2x8", *argv])
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_sweep_where_nothing_ran_fails(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(SUPPORT)
    code = main(["sweep", "--arch", "cli_models:Net", "--input", "2x8", "--batch", "1,2",
                 "--iters", "1", "--warmup", "0", "--no-memory"])  # fmt: skip
    assert code == 2
    out, err = capsys.readouterr()
    assert "no point of the sweep ran (the reasons are above)" in err
    assert (out + err).count("mat1 and mat2 shapes") == 2  # once per point, not again
    code = main(["sweep", "--arch", "cli_models:Net", "--input", "2x8", "--batch", "1",
                 "--iters", "1", "--warmup", "0", "--no-memory", "-q"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err  # nothing printed above: the one line gives the reason
    assert "no point of the sweep ran: batch 1" in err and "mat1 and mat2 shapes" in err


def test_cli_sweep_needs_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--arch", "cli_models:Net"]) == 2
    assert "sweep needs --input" in capsys.readouterr().err


def test_sweep_is_not_a_diff_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(codec.to_dict(synthetic())))
    assert main(["diff", str(path), str(path)]) == 2
    assert "a sweep holds many runs" in capsys.readouterr().err


def test_synthetic_points_label() -> None:
    assert synthetic().points[0].label == "batch 1, float32, 2 threads"
    assert replace(synthetic().points[0], batch=None, threads=None).label == "float32"


def test_cli_sweep_of_an_exported_program(tmp_path: Path) -> None:
    """A .pt2 runs through its program (as `run` does): its own dtype only, and a batch it
    was not exported for fails with the reason, not an attribute error."""
    path = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(Mlp().eval(), (torch.randn(2, 16),)), path)
    out = tmp_path / "s.json"
    code = main([
        "sweep", str(path), "--input", "2x16", "--batch", "2,3", "--dtype", "float32,bfloat16",
        "--iters", "2", "--warmup", "0", "--no-memory", "-q", "--json", str(out),
    ])  # fmt: skip
    assert code == 0
    saved = json.loads(out.read_text())
    ok, other = saved["points"]
    assert (ok["batch"], ok["status"]) == (2, "ok") and ok["shares"]
    assert other["status"] == "failed"
    assert "exported for other input shapes" in other["reason"]
    assert any("bfloat16 skipped: a torch.export program" in n for n in saved["notes"])


# ---- a sweep of generate() ------------------------------------------------------------------


def test_cli_sweep_of_generate_over_prompts_and_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    monkeypatch.chdir(SUPPORT)
    out, page = tmp_path / "g.json", tmp_path / "g.html"
    code = main([
        "sweep", "--arch", "cli_models:tiny_gpt2", "--input", "1x8:int64[0,64)",
        "--generate", "3", "--prompt", "4,6", "--batch", "1,2", "--iters", "2", "--warmup", "0",
        "--no-memory", "--json", str(out), "--html", str(page),
    ])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "sweep 4/4: prompt 6, batch 2, float32" in printed.err
    assert "generate 3 new tokens: first token, inter-token latency, rates" in printed.out
    saved = json.loads(out.read_text())
    assert saved["generate"] == 3
    assert [(p["prompt"], p["batch"]) for p in saved["points"]] == [(4, 1), (4, 2), (6, 1), (6, 2)]
    for p in saved["points"]:
        assert p["status"] == "ok" and p["ttft_ms"]["median"] > 0 and p["itl_ms"]["n"] == 2 * 2
        assert p["decode_tokens_per_s"] > 0 and p["prefill_tokens_per_s"] > 0
    again = codec.load(out)
    assert isinstance(again, Sweep) and again.points[3].prompt == 6
    assert again.points[3].itl is not None and again.points[3].itl.n == 4
    assert 'id="sweep-generation"' in page.read_text()
    assert main(["sweep", "--arch", "cli_models:tiny_gpt2", "--input", "1x8:int64[0,64)",
                 "--prompt", "4"]) == 2  # fmt: skip
    assert "--prompt needs --generate N" in capsys.readouterr().err


def test_decode_scaling_names_where_batching_stops_paying() -> None:
    from layerprof.pivot.sections.sweep import SweepPoint, decode_scaling

    def at(batch: int, tps: float) -> SweepPoint:
        return SweepPoint(batch, "float32", None, decode_tokens_per_s=tps)

    # 1 -> 2 nearly doubles, 2 -> 4 gains 1.3x (>= 1.2), 4 -> 8 gains 1.05x: stops at 4
    measured, pays = decode_scaling((at(4, 260), at(1, 100), at(2, 200), at(8, 273)))
    assert [p.batch for p in measured] == [1, 2, 4, 8] and pays == 4
    # a skipped doubling (1 -> 4) needs 1.2 ** 2 = 1.44x
    assert decode_scaling((at(1, 100), at(4, 140)))[1] == 1
    assert decode_scaling((at(1, 100), at(4, 150)))[1] == 4
    assert decode_scaling((at(1, 100),))[1] is None


@pytest.mark.parametrize(
    "patch,where",
    [
        ({"generate": 0}, "sweep.generate"),
        ({"points": [{"dtype": "float32", "prompt": -3}]}, "points[0].prompt"),
        ({"points": [{"dtype": "float32", "decode_tokens_per_s": -1}]}, "decode_tokens_per_s"),
    ],
)
def test_malformed_generation_fields_are_named(patch: dict[str, Any], where: str) -> None:
    data = {"schema": "layerprof.sweep/1", "model": "m", "inputs": [], "points": []} | patch
    with pytest.raises(ProfileFormatError, match=where.replace(".", r"\.").replace("[", r"\[")):
        codec.from_dict(data)
