"""Bad input: every path raises one TraceError line naming the file, nothing else."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from layerprof.errors import TraceError
from layerprof.trace import analyze


def _one_line(exc: pytest.ExceptionInfo[TraceError], path: Path) -> str:
    message = str(exc.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_truncated_gzip(tmp_path: Path) -> None:
    full = gzip.compress(orjson.dumps({"traceEvents": [{"ph": "X"}] * 1000}))
    path = tmp_path / "cut.json.gz"
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(TraceError) as exc:
        analyze(path)
    assert "truncated gzip" in _one_line(exc, path)


def test_corrupt_gzip(tmp_path: Path) -> None:
    path = tmp_path / "bad.json.gz"
    path.write_bytes(b"\x1f\x8b" + b"\x00garbage" * 10)
    with pytest.raises(TraceError) as exc:
        analyze(path)
    assert "gzip" in _one_line(exc, path)


def test_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"traceEvents": [{"ph": "X", ')
    with pytest.raises(TraceError) as exc:
        analyze(path)
    assert "not valid JSON" in _one_line(exc, path)


@pytest.mark.parametrize("doc", [{"hello": 1}, 42, {"traceEvents": {"not": "a list"}}, "str"])
def test_json_that_is_not_a_trace(tmp_path: Path, doc: object) -> None:
    path = tmp_path / "other.json"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(TraceError) as exc:
        analyze(path)
    assert "not a Chrome/Kineto trace" in _one_line(exc, path)


@pytest.mark.parametrize(
    "doc",
    [
        {"traceEvents": []},
        {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {}}]},
        {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x"}]},  # no ts at all
    ],
)
def test_empty_trace(tmp_path: Path, doc: object) -> None:
    path = tmp_path / "empty.json"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(TraceError) as exc:
        analyze(path)
    assert "empty trace" in _one_line(exc, path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "zero.json"
    path.write_bytes(b"  \n")
    with pytest.raises(TraceError) as exc:
        analyze(path)
    assert "empty file" in _one_line(exc, path)


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a trace")
    with pytest.raises(TraceError) as exc:
        analyze(tmp_path)
    assert "no .json or .json.gz" in _one_line(exc, tmp_path)


def test_missing_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(TraceError) as exc:
        analyze(path)
    assert "no such file" in _one_line(exc, path)


def test_bad_file_in_directory_is_named(tmp_path: Path) -> None:
    good = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2}]}
    (tmp_path / "rank-0.json").write_bytes(orjson.dumps(good))
    bad = tmp_path / "rank-1.json"
    bad.write_text("{")
    with pytest.raises(TraceError) as exc:
        analyze(tmp_path)
    _one_line(exc, bad)


def test_garbage_values_do_not_raise_other_errors(tmp_path: Path) -> None:
    """Odd field types inside events are skipped, never a TypeError."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": ["list"], "pid": 1, "tid": 1, "ts": "x", "dur": 1},
        {"ph": "X", "cat": ["x"], "name": "a", "ts": 1},
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": [1], "tid": 1, "ts": 1},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": None, "args": "notadict"},
        {"ph": "i", "name": "[memory]", "ts": 3, "args": {"Bytes": "many"}},
        "not an event",
        None,
    ]
    path = tmp_path / "odd.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    report = analyze(path)
    ops = {o.name: o for o in report.ranks[0].ops}
    assert ops["ok"].calls == 1


def test_directory_skips_json_that_is_not_a_trace(tmp_path: Path) -> None:
    good = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2}]}
    (tmp_path / "t.rank-0.json").write_bytes(orjson.dumps(good))
    (tmp_path / "p.rank-0.json").write_bytes(orjson.dumps({"schema": "layerprof.profile/1"}))
    report = analyze(tmp_path)
    assert len(report.ranks) == 1
    assert len(report.skipped) == 1 and "p.rank-0.json" in report.skipped[0]
    assert report.to_dict()["skipped"] == list(report.skipped)


def test_tree_rows_are_parent_first_even_when_a_child_is_seen_late(tmp_path: Path) -> None:
    def ev(name, ts, dur):
        return {
            "ph": "X",
            "cat": "user_annotation",
            "name": name,
            "ts": ts,
            "dur": dur,
            "pid": 1,
            "tid": 1,
        }

    events = [
        ev("ProfilerStep#1", 0, 100), ev("A", 1, 40), ev("B", 50, 40),
        ev("ProfilerStep#2", 100, 100), ev("A", 101, 40), ev("a1", 102, 10), ev("B", 150, 40),
        {"ph": "X", "cat": "cpu_op", "name": "op", "ts": 103, "dur": 1, "pid": 1, "tid": 1},
    ]  # fmt: skip
    (tmp_path / "t.json").write_bytes(orjson.dumps({"traceEvents": events}))
    rows = analyze(tmp_path / "t.json").ranks[0].trace.annotations
    assert [r.path for r in rows] == ["A", "A.a1", "B"]


def test_cross_rank_matches_repeated_step_names_by_occurrence(tmp_path: Path) -> None:
    def span(ts: int, dur: int) -> dict[str, object]:
        return {
            "ph": "X",
            "cat": "user_annotation",
            "name": "fwd",
            "ts": ts,
            "dur": dur,
            "pid": 1,
            "tid": 1,
        }

    for rank, durs in ((0, (10, 20)), (1, (12, 26))):
        events = [span(0, durs[0]), span(100, durs[1])]
        (tmp_path / f"rank-{rank}.json").write_bytes(orjson.dumps({"traceEvents": events}))
    cross = analyze(tmp_path).cross
    assert cross is not None
    assert [(s.name, s.spread_ns) for s in cross.steps] == [("fwd #1", 2000), ("fwd #2", 6000)]
