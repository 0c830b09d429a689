"""Two files claiming one rank: the next rule numbers them, and a note names both files."""

from __future__ import annotations

from pathlib import Path

import orjson

from layerprof.pivot.notes import Note, texts
from layerprof.trace import analyze


def write(folder: Path, name: str, rank: int | None) -> Path:
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1,
               "dur": 5}]  # fmt: skip
    doc: dict[str, object] = {"traceEvents": events}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank}
    path = folder / name
    path.write_bytes(orjson.dumps(doc))
    return path


def test_same_distributed_rank_falls_back_to_file_names(tmp_path: Path) -> None:
    a = write(tmp_path, "job.rank-0.json", 0)
    b = write(tmp_path, "job.rank-1.json", 0)
    report = analyze(tmp_path)
    assert report.rank_source == "file name (rank-N / rank_N)"
    assert [r.rank for r in report.ranks] == [0, 1]
    note = f"{a} and {b} both claim rank 0 (distributedInfo.rank); ranks were not taken from it"
    assert all(note in texts(r.notes) for r in report.ranks)
    clash = {"files": (str(a), str(b)), "rank": 0, "rule": "distributedInfo.rank"}
    assert all(Note("rank-clash", note, clash) in r.notes for r in report.ranks)


def test_every_rule_clashing_leaves_file_order_and_says_why(tmp_path: Path) -> None:
    a = write(tmp_path, "a_rank_3.json", 2)
    b = write(tmp_path, "b_rank_3.json", 2)
    report = analyze(tmp_path)
    assert report.rank_source == "file order"
    assert [(r.rank, Path(r.trace.source.file).name) for r in report.ranks] == [
        (0, "a_rank_3.json"),
        (1, "b_rank_3.json"),
    ]
    notes = texts(report.ranks[0].notes)
    assert (
        f"{a} and {b} both claim rank 2 (distributedInfo.rank); ranks were not taken from it"
        in notes
    )
    assert (
        f"{a} and {b} both claim rank 3 (file name (rank-N / rank_N)); ranks were not taken from it"
        in notes
    )
    assert report.to_dict()["ranks"][1]["notes"][:2] == notes[:2]


def test_distinct_ranks_need_no_note(tmp_path: Path) -> None:
    write(tmp_path, "x.json", 1)
    write(tmp_path, "y.json", 0)
    report = analyze(tmp_path)
    assert report.rank_source == "distributedInfo.rank"
    assert [Path(r.trace.source.file).name for r in report.ranks] == ["y.json", "x.json"]
    assert not any(
        n.kind in ("rank-clash", "bad-rank-claim") for r in report.ranks for n in r.notes
    )
