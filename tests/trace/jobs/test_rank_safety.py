"""Hostile rank directories: every listed file is analyzed or named with why, and no
id or size a trace claims sizes an allocation (issue 27, items 5 and 6).

Each case runs ``layerprof analyze`` in a subprocess with a timeout (a FIFO that
blocked a read would hang it) and, for the claimed sizes, under a 4 GiB
address-space cap (``set(range(2**63))`` fails there at once, where without a
cap it took the machine's memory).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.kineto_docs import rank_doc

CAP = 4 << 30
SECONDS = 120


def cli(*args: str, cap: int | None = None) -> subprocess.CompletedProcess[str]:
    """``layerprof ARGS`` in a child (no torch import), bounded in time and memory."""

    def limit() -> None:
        if cap is not None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return subprocess.run(
        [sys.executable, "-m", "layerprof", *args],
        capture_output=True,
        text=True,
        timeout=SECONDS,
        preexec_fn=limit,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def write(folder: Path, name: str, doc: Any) -> Path:
    path = folder / name
    path.write_bytes(orjson.dumps(doc))
    return path


def two_good(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    write(folder, "trace.rank-0.json", rank_doc(0, late=0))
    write(folder, "trace.rank-1.json", rank_doc(1, late=10))


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ---- item 5: an unreadable rank file is named, never dropped -------------------------


def bad_entries(folder: Path) -> dict[str, str]:
    """Rank files 2.. that cannot be read, and the reason each must be named with."""
    os.symlink(folder / "gone.json.old", folder / "trace.rank-2.json")
    os.mkfifo(folder / "trace.rank-3.json")
    os.symlink("/dev/zero", folder / "trace.rank-4.json")
    os.symlink("trace.rank-5.json", folder / "trace.rank-6.json")
    os.symlink("trace.rank-6.json", folder / "trace.rank-5.json")
    (folder / "trace.rank-7.json").mkdir()
    return {
        "trace.rank-2.json": f"a dangling symbolic link (to {folder / 'gone.json.old'})",
        "trace.rank-3.json": "a FIFO (named pipe), not a regular file",
        "trace.rank-4.json": "a character device, not a regular file",
        "trace.rank-5.json": "a symbolic link loop",
        "trace.rank-6.json": "a symbolic link loop",
        "trace.rank-7.json": "a directory, not a regular file",
    }


@pytest.mark.parametrize("executor", ["serial", "processes=2"])
@pytest.mark.parametrize("glob", [False, True])
def test_unreadable_rank_files_fail_by_name(tmp_path: Path, executor: str, glob: bool) -> None:
    folder = tmp_path / "ranks"
    two_good(folder)
    why = bad_entries(folder)
    target = str(folder / "trace.rank-*.json") if glob else str(folder)
    done = cli("analyze", target, "-q", "--executor", executor, "--json", str(tmp_path / "o.json"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"layerprof: error: {len(why)} of {len(why) + 2} traces failed: ")
    for name, reason in why.items():
        assert f"{folder / name}: {reason}" in lines[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "o.json").exists() and not leftovers(tmp_path)


def test_partial_lists_each_unreadable_rank_in_failed(tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    two_good(folder)
    why = bad_entries(folder)
    out = tmp_path / "run.json"
    done = cli("analyze", str(folder), "-q", "--partial", "--json", str(out))
    assert done.returncode == 0, done.stderr
    doc = orjson.loads(out.read_bytes())
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["failed"] == [f"{folder / name}: {reason}" for name, reason in why.items()]
    assert f"merged 2 of {len(why) + 2} traces (--partial)" in " ".join(doc["notes"])


def test_a_fifo_named_on_its_own_is_still_read(tmp_path: Path) -> None:
    """A pipe the user names (``analyze <(zcat t.json.gz)``) is read, not refused."""
    doc = rank_doc(0, late=0)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    child = subprocess.Popen(
        [sys.executable, "-m", "layerprof", "analyze", str(fifo), "-q", "--json", "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    with open(fifo, "wb") as w:
        w.write(orjson.dumps(doc))
    out, err = child.communicate(timeout=SECONDS)
    assert child.returncode == 0, err
    assert [r["rank"] for r in orjson.loads(out)["ranks"]] == [0]


# ---- item 6: ids and sizes claimed by a trace size nothing -------------------------------


def claims(rank1: Any = 1, group: Any = 2, world: Any = 2) -> list[dict[str, Any]]:
    docs = [rank_doc(0, late=0, world=world), rank_doc(1, late=10, world=world)]
    docs[1]["distributedInfo"]["rank"] = rank1
    for doc in docs:
        for e in doc["traceEvents"]:
            if "Group size" in e.get("args", {}):
                e["args"]["Group size"] = group
    return docs


HUGE = [
    ("rank 2**63+5", claims(rank1=2**63 + 5), [0, 1], None),
    ("rank 10**18", claims(rank1=10**18), [0, 1], None),
    ("rank -5", claims(rank1=-5), [0, 1], None),
    # A rank past the trace's own world_size is believed, and the gap said.
    ("rank past world_size", claims(rank1=7), [0, 7], "2 of 8 ranks present; missing: 1, 2"),
    ("group size 10**10", claims(group=10**10), [0, 1], None),
    ("world_size 10**10", claims(world=10**10, group=None), [0, 1], None),
    # The largest sizes a C int allows are legal claims: said, never allocated.
    ("group size 2**31", claims(group=2**31), [0, 1], "2 of 2147483648 ranks present"),
    ("rank 2**31-1", claims(rank1=2**31 - 1, world=None), [0, 2**31 - 1], "missing: 1, 2, 3"),
]


@pytest.mark.parametrize(("case", "docs", "ranks", "note"), HUGE, ids=[h[0] for h in HUGE])
def test_claimed_ids_and_sizes_allocate_nothing(
    tmp_path: Path, case: str, docs: list[dict[str, Any]], ranks: list[int], note: str | None
) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r, doc in enumerate(docs):
        write(folder, f"trace.rank-{r}.json", doc)
    out = tmp_path / "run.json"
    done = cli("analyze", str(folder), "-q", "--executor", "serial", "--json", str(out), cap=CAP)
    assert done.returncode == 0, done.stderr
    run = orjson.loads(out.read_bytes())
    assert [r["rank"] for r in run["ranks"]] == ranks
    assert run["stragglers"]["matched"] > 0
    claimed = docs[1]["distributedInfo"]["rank"]
    if not 0 <= claimed < 2**31:  # said, naming the file and its claim
        said_rank = f"trace.rank-1.json claims rank {claimed} (distributedInfo.rank)"
        assert said_rank in " ".join(run["ranks"][0]["notes"])
    said = " ".join(run["stragglers"]["notes"])
    assert (note in said) if note else "ranks present" not in said


def test_a_rank_number_too_long_in_a_file_name_is_not_a_rank(tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for name, r in (("trace.rank-0.json", 0), ("trace.rank-99999999999999999999999999.json", 1)):
        doc = rank_doc(r, late=10 * r, world=None)
        del doc["distributedInfo"]
        write(folder, name, doc)
    out = tmp_path / "run.json"
    done = cli("analyze", str(folder), "-q", "--executor", "serial", "--json", str(out), cap=CAP)
    assert done.returncode == 0, done.stderr
    run = orjson.loads(out.read_bytes())
    assert run["rank_source"] == "file order"
    assert [r["rank"] for r in run["ranks"]] == [0, 1]
