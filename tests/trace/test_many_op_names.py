"""A trace with many distinct operator names (issue 43, item 16): 200k names took 46 s
and 1.5 GB to analyze and wrote a row per name. The profile keeps the operators with
the most self time, sums the rest into one row per layer and phase, and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layerprof.cli import main
from layerprof.pivot.records import OpStat
from layerprof.trace import analyze, attribution
from layerprof.traceformat import STEP_PREFIX
from tests.support.kineto_docs import span, write

NAMES = 300
CAP = 40
US = 1000


def _trace(tmp_path: Path) -> Path:
    """Two 10 ms steps; operator i (aten::op_00000 ...) runs once per step for
    1 + i % 7 µs, so self times tie in groups and the cap must break ties the same way."""
    events = []
    for step in range(2):
        t0 = step * 10_000
        events.append(span("user_annotation", f"{STEP_PREFIX}{step}", t0, 9_000))
        ts = t0 + 1
        for i in range(NAMES):
            events.append(span("cpu_op", f"aten::op_{i:05d}", ts, 1 + i % 7))
            ts += 10
    return write(tmp_path, {"traceEvents": events})


def _ops(tmp_path: Path, cap: int, monkeypatch: pytest.MonkeyPatch) -> tuple[OpStat, ...]:
    monkeypatch.setattr(attribution, "MAX_OP_ROWS", cap)
    profile = analyze(_trace(tmp_path)).rank()
    assert profile.ops is not None
    return profile.ops


def test_the_rows_are_capped_and_still_add_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = _ops(tmp_path, NAMES, monkeypatch)
    assert len(every) == NAMES and all(o.name != attribution.OTHER_OPS for o in every)
    capped = _ops(tmp_path, CAP, monkeypatch)
    assert len(capped) == CAP + 1
    others = [o for o in capped if o.name == attribution.OTHER_OPS]
    assert len(others) == 1
    (other,) = others
    listed = [o for o in capped if o is not other]
    # the listed rows are the ones with the most self time, their numbers unchanged
    assert min(o.self_ns for o in listed) >= max(o.self_ns for o in every[CAP:])
    by_name = {o.name: o for o in every}
    assert all(by_name[o.name] == o for o in listed)
    # the rest, summed: calls and times add up to what every row says
    rest = [o for o in every if o.name not in {x.name for x in listed}]
    assert len(rest) == NAMES - CAP
    assert other.calls == sum(o.calls for o in rest) == NAMES - CAP
    assert other.self_ns == sum(o.self_ns for o in rest)
    assert other.total_ns == sum(o.total_ns for o in rest)
    assert sum(o.self_ns for o in capped) == sum(o.self_ns for o in every)
    assert other.samples is not None and other.samples.self_ns.values is not None
    assert len(other.samples.self_ns.values) == 2  # per step, as every row


def test_the_note_and_the_json_say_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(attribution, "MAX_OP_ROWS", CAP)
    profile = analyze(_trace(tmp_path)).rank()
    notes = [n for n in profile.notes if n.kind == "ops-capped"]
    assert len(notes) == 1 and notes[0].data == {"max_rows": CAP, "summed_rows": 1}
    out = tmp_path / "a.json"
    assert main(["analyze", str(tmp_path / "t.json"), "--json", str(out), "-q"]) == 0
    saved = json.loads(out.read_text())
    (rank,) = saved["ranks"]
    names = [o["name"] for o in rank["ops"]]
    assert len(names) == CAP + 1 and attribution.OTHER_OPS in names
    assert any(f"than the {CAP} with the most self time" in n for n in rank["notes"])


def test_a_trace_under_the_cap_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = analyze(_trace(tmp_path)).rank()
    assert profile.ops is not None and len(profile.ops) == NAMES  # the default cap is far above
    assert not [n for n in profile.notes if n.kind == "ops-capped"]
