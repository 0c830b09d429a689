"""Saved files whose values are outside their domain are one-line errors naming the field,
never a crash (issue 34, item 2): a parent cycle in activation memory, a ratio that
overflows the diff's arithmetic, negative times and counts, a tree deeper than Python's
recursion limit. Each file is built from a real profile, then changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import layerprof
from layerprof.cli import main
from layerprof.cli.processes import gather
from tests.support.diff_subjects import mlp, synth
from tests.support.html_subjects import PROFILES


@pytest.fixture(scope="module")
def loop_doc() -> dict[str, Any]:
    """A Recorder profile of a training loop: loop and activation_memory sections."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with layerprof.Recorder(model, backward=True, memory=True) as rec:
        for _ in range(3):
            model(torch.randn(5, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
            rec.step()
    doc: dict[str, Any] = rec.profile().to_dict()
    return doc


@pytest.fixture(scope="module")
def repeats_doc() -> dict[str, Any]:
    model = mlp()
    doc: dict[str, Any] = gather([synth(model, seed=s) for s in range(3)]).to_dict()
    return doc


def fails_cleanly(
    doc: dict[str, Any], where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    for extra in ([], ["--html", str(tmp_path / "p.html")]):
        code = main(["report", str(path), *extra])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "internal error" not in err and "Traceback" not in err
        assert err.startswith("layerprof: error: ") and where in err, err
    assert not (tmp_path / "p.html").exists()


def test_a_parent_cycle_in_activation_memory(
    loop_doc: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(json.dumps(loop_doc))
    rows = doc["activation_memory"]["layers"]
    by_path = {r["path"]: r for r in rows}
    by_path["0"]["parent"], by_path[""]["parent"] = "", "0"
    fails_cleanly(doc, "form a cycle", tmp_path, capsys)


def test_a_path_listed_twice_in_activation_memory(
    loop_doc: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(json.dumps(loop_doc))
    rows = doc["activation_memory"]["layers"]
    rows.append(dict(rows[-1]))
    fails_cleanly(doc, "listed twice", tmp_path, capsys)


@pytest.mark.parametrize("key", ["forwards", "backwards", "index"])
def test_negative_counts_in_loop_steps(
    key: str, loop_doc: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(json.dumps(loop_doc))
    doc["loop"]["steps"][0][key] = -1
    fails_cleanly(doc, f"loop.steps[0].{key}: expected a count >= 0", tmp_path, capsys)


@pytest.mark.parametrize("value", [-1.0, 1e308])
def test_step_times_outside_their_domain(
    value: float, loop_doc: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(json.dumps(loop_doc))
    doc["loop"]["steps"][0]["wall_ms"] = value
    fails_cleanly(doc, "wall_ms", tmp_path, capsys)
    doc = json.loads(json.dumps(loop_doc))
    doc["loop"]["layers"][0]["forward_total_ms"][0] = value
    fails_cleanly(doc, "forward_total_ms", tmp_path, capsys)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("rest_ratio", 1e308, "expected a number from 0 to 1e+09"),
        ("rest_ratio", -0.5, "expected a number from 0 to 1e+09"),
        ("latency_ms", -1.0, "expected a time >= 0"),
        ("self_ms", -1.0, "expected a time >= 0"),
    ],
)
def test_repeats_outside_their_domain(
    field: str,
    value: float,
    said: str,
    repeats_doc: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = json.loads(json.dumps(repeats_doc))
    run = doc["repeats"]["runs"][1]
    if isinstance(run[field], dict):
        run[field][next(iter(run[field]))] = value
    else:
        run[field] = value
    fails_cleanly(doc, said, tmp_path, capsys)
    # and the diff of such a file fails the same way, instead of passing its gate
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(repeats_doc))
    code = main(["diff", str(good), str(path), "--fail-above", "5%", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "internal error" not in err, err


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("calls", -5, "calls: expected a number from 0"),
        ("calls", 1e308, "calls: expected a number from 0"),
        ("params", -5, "params: expected a count >= 0"),
        ("params_own", -5, "params_own: expected a count >= 0"),
        ("flops", -5, "flops: expected a count >= 0"),
        ("output_bytes", -5, "output_bytes: expected a count >= 0"),
        ("flops_elementwise", -5, "flops_elementwise: expected a count >= 0"),
        ("bytes_moved", -5, "bytes_moved: expected a count >= 0"),
    ],
)
def test_a_layer_row_outside_its_domain(
    field: str, value: float, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A layer's calls, parameters, FLOPs and bytes cannot be negative: a file saying -5
    calls or -5 FLOPs loaded and printed them (and '-131 kFLOP/s' in the roofline), and
    1e308 calls read 'calls per forward 1 -> 1e+308' in a diff."""
    doc = json.loads((PROFILES / "hooks.json").read_text())
    row = next(r for r in doc["layers"] if r["path"] and "flops_elementwise" in r)
    row[field] = value
    fails_cleanly(doc, f"profile.layers[{doc['layers'].index(row)}].{said}", tmp_path, capsys)


@pytest.mark.parametrize("value", [-5, 1e308])
def test_an_operator_calls_outside_their_domain(
    value: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An operator's -5 calls per forward printed as -5 in the ops table."""
    doc = json.loads((PROFILES / "ops.json").read_text())
    doc["ops"][0]["calls"] = value
    fails_cleanly(doc, "profile.ops[0].calls: expected a number from 0", tmp_path, capsys)


def test_a_tree_deeper_than_the_recursion_limit_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads((PROFILES / "hooks.json").read_text())
    template = {k: v for k, v in doc["layers"][0].items() if k != "series"}
    layers = []
    for depth in range(1100):  # Python's recursion limit is 1000
        path = ".".join(["m"] * depth)
        parent = None if depth == 0 else ".".join(["m"] * (depth - 1))
        layers.append({**template, "path": path, "parent": parent, "depth": depth,
                       "type": "Sequential", "calls": 1})  # fmt: skip
    doc["layers"] = layers
    doc.pop("samples", None)
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(doc))
    code = main(["report", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.count("└─ m") >= 1099


# ---- the Python API's boundary (issue 34, item 7) -------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"skip": -1}, "StepSchedule(skip=-1): skip must be a whole number >= 0"),
        ({"active": 0}, "StepSchedule(active=0): active must be a whole number >= 1"),
        ({"skip": "2"}, "StepSchedule(skip='2'): skip must be a whole number >= 0"),
        ({"skip": None}, "StepSchedule(skip=None): skip must be"),
        ({"skip": 1.5}, "StepSchedule(skip=1.5): skip must be"),
        ({"warmup": True}, "StepSchedule(warmup=True): warmup must be"),
    ],
)
def test_step_schedule_refuses_what_is_not_a_count(kwargs: dict[str, Any], said: str) -> None:
    from layerprof import StepSchedule
    from layerprof.errors import UsageError

    with pytest.raises(UsageError) as exc:
        StepSchedule(**kwargs)
    assert str(exc.value).startswith(said)


@pytest.mark.parametrize("model", ["x", None, 3])
def test_recorder_refuses_what_is_not_a_module(model: Any) -> None:
    from layerprof.errors import UsageError

    with pytest.raises(UsageError, match=r"^Recorder\(model\): expected a torch.nn.Module, found"):
        layerprof.Recorder(model)
    with pytest.raises(
        UsageError, match=r"Recorder\(schedule=...\): expected a layerprof.StepSchedule"
    ):
        layerprof.Recorder(nn.Linear(2, 2), schedule={"skip": 1})  # type: ignore[arg-type]
