"""The history file: what it keeps, how it is versioned and migrated, parallel writers,
a writer killed mid-transaction, and files it must refuse in one line."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from layerprof.history import store as store_module
from layerprof.history.records import HistoryError, LayerPoint, RunEntry
from layerprof.history.store import APPLICATION_ID, SCHEMA_VERSION, HistoryStore
from tests.support.history_runs import ENV, Shape, entries
from tests.support.paths import ROOT


def test_a_run_comes_back_as_it_went_in(tmp_path: Path) -> None:
    run = entries(Shape(runs=1), 0)[0]
    full = RunEntry(
        commit=run.commit, env=run.env, when_ns=run.when_ns, branch="main", source="p.json",
        figures=run.figures, latency_samples_ns=(5, 7, 6),
        layers=(LayerPoint("a", 10, 20, 1, 2, 30, 40, 3, 4), LayerPoint("a.b", 10, 10)),
    )  # fmt: skip
    with HistoryStore(tmp_path / "h.db", create=True) as store:
        (run_id,) = store.add([full])
        ((stored, env),) = store.runs()
        assert env == ENV and stored.commit == run.commit and stored.branch == "main"
        assert stored.source == "p.json" and stored.when_ns == run.when_ns
        assert store.layers_of(run_id) == list(full.layers)
        assert store.figures_of(run_id) == list(full.figures)
        assert store.latency_samples(run_id) == (5, 7, 6)
        window = store.window(ENV, 10)
        assert window.paths == ("a", "a.b") and window.device_self_ns is not None
        assert window.self_ns.tolist() == [[10.0], [10.0]]


def test_runs_are_compared_only_within_their_environment(tmp_path: Path) -> None:
    from dataclasses import replace

    other = replace(ENV, torch="2.y")
    with HistoryStore(tmp_path / "h.db", create=True) as store:
        store.add(entries(Shape(runs=5), 0))
        store.add(entries(Shape(runs=3), 1, env=other))
        envs = store.environments()
        assert [(e.env, e.runs) for e in envs] == [(ENV, 5), (other, 3)]
        assert len(store.window(other, 100).runs) == 3
        assert [r.commit for r in store.window(ENV, 2).runs] == ["c003", "c004"]


def test_the_file_says_what_it_is_and_its_version(tmp_path: Path) -> None:
    HistoryStore(tmp_path / "h.db", create=True).close()
    conn = sqlite3.connect(tmp_path / "h.db")
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_an_older_file_is_migrated_once_in_one_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version-1 file opened by a layerprof of schema 2 gets migration 1 -> 2, and a
    migration that fails leaves the file at version 1 with its runs."""
    path = tmp_path / "h.db"
    with HistoryStore(path, create=True) as store:
        store.add(entries(Shape(runs=2), 0))

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE runs ADD COLUMN note TEXT")
        raise RuntimeError("migration failed half-way")

    monkeypatch.setattr(store_module, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, broken])
    with pytest.raises(RuntimeError, match="half-way"):
        HistoryStore(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert "note" not in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    conn.close()

    def add_note(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE runs ADD COLUMN note TEXT")

    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS[:1], add_note])
    with HistoryStore(path) as store:
        assert len(store.runs()) == 2
    with HistoryStore(path) as store:  # already at 2: nothing runs twice
        assert len(store.runs()) == 2
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    conn.close()


def test_a_file_another_process_is_creating_is_read_in_one_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six processes adding to one new file at once: one read its application_id before
    another's creation committed and its user_version after, and refused the file as
    foreign (2 of 90 in a stress run). The two reads (and the table count) are one
    read transaction now; here the other writer commits between them."""
    path = tmp_path / "h.db"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("PRAGMA journal_mode=WAL")
    other.execute("BEGIN IMMEDIATE")
    store_module._create(other)
    other.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    other.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    reads: list[int] = []

    def racing(conn: sqlite3.Connection) -> tuple[int, int]:
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        if not reads:
            other.execute("COMMIT")  # the other process, between our two reads
        reads.append(app)
        return int(app), int(conn.execute("PRAGMA user_version").fetchone()[0])

    monkeypatch.setattr(store_module, "_identity", racing)
    with HistoryStore(path, create=True) as store:
        store.add(entries(Shape(runs=1), 0))
        assert len(store.runs()) == 1
    assert reads[0] == 0  # it did read before the other's commit
    other.close()


def test_a_newer_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    HistoryStore(path, create=True).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(HistoryError, match="newer than this layerprof reads"):
        HistoryStore(path)


def test_foreign_files_are_refused_in_one_line(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    other = tmp_path / "app.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    tagged = tmp_path / "tagged.db"
    conn = sqlite3.connect(tagged)
    conn.execute("PRAGMA application_id = 1234")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    for path, words in ((text, "not an SQLite file"), (other, "another application"),
                        (tagged, "application_id 0x4d2")):  # fmt: skip
        with pytest.raises(HistoryError, match=words) as info:
            HistoryStore(path, create=True)
        assert "\n" not in str(info.value)
    assert other.stat().st_size > 0 and text.read_text() == "not a database\n"  # left alone
    with pytest.raises(HistoryError, match="no history database there"):
        HistoryStore(tmp_path / "missing.db")


def test_a_damaged_file_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with HistoryStore(path, create=True) as store:
        store.add(entries(Shape(runs=30), 0))
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    data[page : len(data)] = b"\xa5" * (len(data) - page)  # every page after the header's
    path.write_bytes(bytes(data))
    with (
        pytest.raises(HistoryError, match="damaged history database") as info,
        HistoryStore(path) as store,
    ):
        store.window(ENV, 100)
    assert "\n" not in str(info.value)


#: The writer processes need no BLAS threads (a busy machine may refuse to start them).
_CHILD_ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}

_WRITER = textwrap.dedent(
    """
    import sys
    from layerprof.history.store import HistoryStore
    from tests.support.history_runs import Shape, entries
    path, seed = sys.argv[1], int(sys.argv[2])
    for run in entries(Shape(runs=10), seed):
        with HistoryStore(path, create=True) as store:
            store.add([run])
    """
)


def test_parallel_writers_all_land(tmp_path: Path) -> None:
    """Four processes adding ten runs each, one transaction per run, into one new file."""
    path = tmp_path / "ci" / "h.db"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), str(seed)],
            cwd=ROOT,
            env=_CHILD_ENV,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    with HistoryStore(path) as store:
        assert len(store.runs()) == 40
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT COUNT(*) FROM layer_times").fetchone()[0] == 40 * 7
    conn.close()


_KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from layerprof.history.store import HistoryStore
    from tests.support.history_runs import Shape, entries
    runs = entries(Shape(runs=3), 0)
    store = HistoryStore(sys.argv[1], create=True)
    store.add(runs[:2])

    def then_killed():
        yield runs[2]
        os.kill(os.getpid(), signal.SIGKILL)  # mid-transaction: run 3's rows are written
        yield runs[2]

    store.add(then_killed())
    """
)


def test_a_writer_killed_mid_transaction_loses_nothing_committed(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    done = subprocess.run(
        [sys.executable, "-c", _KILLED, str(path)], cwd=ROOT, env=_CHILD_ENV, timeout=300
    )
    assert done.returncode == -signal.SIGKILL
    assert Path(f"{path}-wal").exists()  # the log the killed writer left
    with HistoryStore(path) as store:
        assert [r.commit for r, _ in store.runs()] == ["c000", "c001"]
        store.add(entries(Shape(runs=3), 0)[2:])  # and the file takes writes again
        assert [r.commit for r, _ in store.runs()] == ["c000", "c001", "c002"]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT COUNT(*) FROM layer_times").fetchone()[0] == 3 * 7
    conn.close()


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ("attempt to write a readonly database", "cannot write the history or its log"),
        ("unable to open database file", "cannot write the history or its log"),
        ("database is locked", "stayed locked by another writer"),
        ("disk I/O error", "damaged history database"),
    ],
)
def test_sqlite_errors_read_as_one_line_naming_the_file(
    tmp_path: Path, message: str, words: str
) -> None:
    """What sqlite says while reading or adding, as the one line the CLI prints (a
    read-only folder cannot be made here: the tests may run as root)."""
    with (
        HistoryStore(tmp_path / "h.db", create=True) as store,
        pytest.raises(HistoryError, match=words) as info,
        store._guard(),
    ):
        raise sqlite3.OperationalError(message)
    assert str(info.value).startswith(f"{tmp_path / 'h.db'}: ") and "\n" not in str(info.value)
