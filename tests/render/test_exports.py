"""Exported files parse back in their consumers' formats."""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch
from torch import nn

from layerprof.capture.options import OpOptions
from layerprof.capture.profiling.profiler import RawTrace, capture_ops, profile_from_capture
from layerprof.load.demo import TinyTransformer
from layerprof.pivot.profile import Profile
from layerprof.render.chrome import write_chrome_trace, write_tensorboard_dir
from layerprof.render.stacks import (
    SPEEDSCOPE_SCHEMA,
    folded_lines,
    write_folded,
    write_speedscope,
)


@pytest.fixture(scope="module")
def captured() -> tuple[RawTrace, Profile]:
    torch.manual_seed(0)
    model = TinyTransformer(vocab=100, dim=32, heads=2, depth=1).eval()
    cap = capture_ops(
        model, (torch.randint(0, 100, (2, 16)),), None, iters=2, device="cpu",
        options=OpOptions(), grad_ctx_factory=torch.inference_mode,
    )  # fmt: skip
    return cap, profile_from_capture(model, cap)


def load_trace(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    data: dict[str, Any] = orjson.loads(raw)
    return data


def assert_nested_per_thread(spans: list[dict[str, Any]]) -> None:
    """Perfetto-style: on each (pid, tid), spans either nest or follow each other."""
    by_lane: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for ev in spans:
        by_lane.setdefault((ev["pid"], ev["tid"]), []).append(ev)
    eps = 1e-3  # µs floats near 1e12 carry ~0.5 ns of rounding
    for lane in by_lane.values():
        stack: list[float] = []
        for ev in sorted(lane, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1] <= ev["ts"] + eps:
                stack.pop()
            end = ev["ts"] + ev["dur"]
            assert not stack or end <= stack[-1] + eps, ev["name"]
            stack.append(end)


@pytest.mark.parametrize("name", ["trace.json", "sub/dir/trace.json.gz"])
def test_chrome_trace_has_layer_lane_above_kept_kineto_events(
    tmp_path: Path, captured: tuple[RawTrace, Profile], name: str
) -> None:
    _, profile = captured
    path = write_chrome_trace(tmp_path / name, profile)
    data = load_trace(path)
    events = data["traceEvents"]
    assert "baseTimeNanoseconds" in data or "schemaVersion" in data  # Kineto metadata kept
    meta = [e for e in events if e.get("ph") == "M" and e.get("name") == "process_name"]
    lane_pid = next(e["pid"] for e in meta if e["args"]["name"] == "layers")
    layers = [e for e in events if e.get("pid") == lane_pid and e.get("ph") == "X"]
    assert {e["args"]["path"] for e in layers} >= {"", "embed", "layers.0.attn.qkv"}
    assert {e["name"] for e in layers if e["args"]["path"] == ""} == {"TinyTransformer"}
    assert len([e for e in layers if e["args"]["path"] == ""]) == 2  # one per iteration
    assert not any(str(e.get("name", "")).startswith("layer:") for e in events)
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    assert any(e["name"] == "aten::addmm" for e in ops)
    assert_nested_per_thread(layers)
    assert_nested_per_thread([e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"])
    sort = [e for e in events if e.get("name") == "process_sort_index" and e["pid"] == lane_pid]
    assert sort and sort[0]["args"]["sort_index"] == -1


def test_tensorboard_dir_layout(tmp_path: Path, captured: tuple[RawTrace, Profile]) -> None:
    _, profile = captured
    path = write_tensorboard_dir(tmp_path / "runs" / "exp1", profile, worker="host_1")
    assert path.parent == tmp_path / "runs" / "exp1"
    assert re.fullmatch(r"host_1\.\d+\.pt\.trace\.json", path.name)
    assert load_trace(path)["traceEvents"]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp files left


def test_folded_stacks(tmp_path: Path, captured: tuple[RawTrace, Profile]) -> None:
    _, profile = captured
    path = write_folded(tmp_path / "out.folded", profile)
    lines = path.read_text().splitlines()
    assert lines == folded_lines(profile)
    for line in lines:
        assert re.fullmatch(r"[^;\n]+(;[^;\n]+)* \d+", line), line
        assert line.startswith("TinyTransformer")
    stacks = {line.rsplit(" ", 1)[0] for line in lines}
    assert "TinyTransformer;layers;0;attn;qkv" in stacks
    total_us = sum(int(line.rsplit(" ", 1)[1]) for line in lines)
    root_us = profile.row("").total_ns / 1000
    # each line is rounded to whole µs; medians per layer need not add up exactly
    assert abs(total_us - root_us) <= 0.25 * root_us + len(lines)


def test_speedscope_schema_fields(tmp_path: Path, captured: tuple[RawTrace, Profile]) -> None:
    _, profile = captured
    path = write_speedscope(tmp_path / "p.speedscope.json", profile)
    doc = orjson.loads(path.read_bytes())
    # required fields of https://www.speedscope.app/file-format-schema.json
    assert doc["$schema"] == SPEEDSCOPE_SCHEMA
    frames = doc["shared"]["frames"]
    assert frames and all(isinstance(f["name"], str) for f in frames)
    assert doc["profiles"]
    for prof in doc["profiles"]:
        for key in ("type", "name", "unit", "startValue", "endValue", "events"):
            assert key in prof
        assert prof["type"] == "evented" and prof["unit"] == "nanoseconds"
        stack: list[int] = []
        last = prof["startValue"]
        for ev in prof["events"]:
            assert ev["type"] in ("O", "C") and 0 <= ev["frame"] < len(frames)
            assert ev["at"] >= last
            last = ev["at"]
            if ev["type"] == "O":
                stack.append(ev["frame"])
            else:
                assert stack.pop() == ev["frame"]  # balanced, properly nested
        assert not stack and last == prof["endValue"]


def test_speedscope_backward_profile_when_present(tmp_path: Path) -> None:
    from dataclasses import replace

    model = nn.Sequential(nn.Linear(4, 4))
    cap = capture_ops(
        model, (torch.randn(2, 4),), None, iters=1, device="cpu", options=OpOptions(), backward=True
    )
    profile = profile_from_capture(model, cap)
    assert profile.row("0").backward_total_ns is not None
    doc = orjson.loads(write_speedscope(tmp_path / "s.json", profile).read_bytes())
    assert [p["name"].split()[1] for p in doc["profiles"]] == ["forward", "backward"]
    empty = replace(profile, samples={})
    assert orjson.loads(write_speedscope(tmp_path / "e.json", empty).read_bytes())["profiles"]
