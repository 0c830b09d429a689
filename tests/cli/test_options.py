"""Every profiler option of ``layerprof run --ops`` has an effect a user can see (11.8):
a column, a JSON field, a line in the report, or an error saying it would do nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from layerprof.cli import main
from tests.support.cli_models import Net
from tests.support.paths import ROOT

RUN = [
    "run",
    "--arch",
    "tests.support.cli_models:Net",
    "--input",
    "2x4",
    "--warmup",
    "1",
    "--iters",
    "3",
]


@pytest.fixture(autouse=True)
def _cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, *flags: str
) -> tuple[str, dict[str, Any]]:
    out_json = tmp_path / "p.json"
    code = main([*RUN, "--ops", *flags, "--json", str(out_json)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, json.loads(out_json.read_text())


def flat_table(out: str) -> str:
    flat = out[out.index("operators (all layers)") :]
    return flat[: flat.index("operators in")]


def op(data: dict[str, Any], name: str, layer: str) -> dict[str, Any]:
    return next(o for o in data["ops"] if o["name"] == name and o["layer"] == layer)


def test_with_flops_adds_a_column_and_a_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, data = run(capsys, tmp_path, "--with-flops")
    assert "FLOPs" in flat_table(out).splitlines()[1]
    # fc1 is Linear(4, 8) on 2 rows: 2 * 2 * 4 * 8 multiply-adds, as torch estimates them
    assert op(data, "aten::addmm", "fc1")["flops"] == 2 * 2 * 4 * 8
    plain, data = run(capsys, tmp_path)
    assert "FLOPs" not in flat_table(plain) and "flops" not in op(data, "aten::addmm", "fc1")


def test_record_shapes_alone_shows_shapes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, data = run(capsys, tmp_path, "--record-shapes")
    table = flat_table(out)
    assert "Input shapes" in table
    addmm = next(ln for ln in table.splitlines() if ln.startswith("aten::addmm"))
    # the row keeps the shapes of the call that took more self time: fc1's (bias, input,
    # weight^T) or block2.1's, whichever the machine made slower this time
    assert "[8], [2, 4], [4, 8]" in addmm or "[3], [2, 8], [8, 3]" in addmm, addmm
    assert "(+1 more)" in addmm  # the other call has other shapes: merged, and said so
    assert op(data, "aten::addmm", "fc1")["input_shapes"].startswith("[8], [2, 4], [4, 8]")
    plain, _ = run(capsys, tmp_path)
    assert "Input shapes" not in plain


def test_group_by_shape_splits_rows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out, _ = run(capsys, tmp_path, "--group-by-shape")
    rows = [ln for ln in flat_table(out).splitlines() if ln.startswith("aten::addmm")]
    assert len(rows) == 2 and not any("more)" in r for r in rows)


def test_profile_memory_columns_match_key_averages(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, data = run(capsys, tmp_path, "--profile-memory")
    header = flat_table(out).splitlines()[1]
    assert "CPU Mem" in header and "Self CPU Mem" in header
    # the reference: torch's own table over one forward of the same model
    model = Net().eval()
    with torch.inference_mode(), torch.profiler.profile(profile_memory=True) as prof:
        model(torch.randn(2, 4))
    ref = {e.key: (e.cpu_memory_usage, e.self_cpu_memory_usage) for e in prof.key_averages()}
    mine: dict[str, list[float]] = {}
    for o in data["ops"]:
        total = mine.setdefault(o["name"], [0.0, 0.0])
        total[0] += o.get("cpu_mem_bytes", 0)
        total[1] += o.get("self_cpu_mem_bytes", 0)
    for name in ("aten::linear", "aten::addmm", "aten::relu", "aten::clamp_min"):
        assert tuple(mine[name]) == ref[name], name
    assert op(data, "aten::addmm", "fc1")["cpu_mem_bytes"] == 2 * 8 * 4  # its float32 output


def test_schedule_is_echoed_and_stored(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out, data = run(capsys, tmp_path, "--schedule", "1,1,1,1")
    assert "schedule wait 1  warmup 1  active 1  repeat 1" in out
    assert data["meta"]["extra"]["ops"]["schedule"] == {
        "wait": 1, "warmup": 1, "active": 1, "repeat": 1
    }  # fmt: skip
    _, data = run(capsys, tmp_path, "--record-shapes")
    assert data["meta"]["extra"]["ops"] == {"options": ["record_shapes"]}


def test_with_stack_needs_a_trace_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main([*RUN, "--ops", "--with-stack"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("layerprof: error: --with-stack records Python stacks")
    trace = tmp_path / "t.json"
    assert main([*RUN, "--ops", "--with-stack", "--trace", str(trace), "--quiet"]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("cat") == "python_function" for e in events)  # the stacks it asked for


def test_saved_op_columns_round_trip(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from layerprof.pivot.profile import Profile

    run(capsys, tmp_path, "--profile-memory", "--with-flops")
    prof = Profile.load(tmp_path / "p.json")
    addmm = next(o for o in prof.ops if o.name == "aten::addmm" and o.layer == "fc1")
    assert addmm.flops == 128 and addmm.cpu_mem_bytes == 64 and addmm.self_cpu_mem_bytes == 64
    assert isinstance(prof.ops[0], type(addmm)) and nn is not None
