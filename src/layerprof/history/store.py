"""The history database: one SQLite file (stdlib ``sqlite3``), a versioned schema.

* **Identity.** ``PRAGMA application_id`` marks the file as a layerprof history and
  ``PRAGMA user_version`` holds its schema version. A file that is not SQLite, a
  SQLite file of another application, a damaged file or a file of a newer schema
  is refused with one line (``HistoryError``).
* **Migrations.** ``MIGRATIONS[v]`` takes a file from version ``v`` to ``v + 1``;
  they run in one ``BEGIN IMMEDIATE`` transaction with the version bump, so a file
  is at one version or the next, never between, and two processes opening an old
  file migrate it once.
* **Concurrency.** Write-ahead logging: readers never block the one writer, and
  writers (parallel CI jobs) wait for each other (``BUSY_TIMEOUT_S``). Each ``add``
  is one transaction (``synchronous=FULL``): a writer killed mid-way leaves the file
  as its last commit left it.
* **Layout.** Per-layer medians are rows of a ``WITHOUT ROWID`` table keyed by
  (run, layer), layers named once in ``paths``: reading the newest runs of an
  environment is one range scan per run (``runs_by_env`` finds them), and 10,000
  runs of 1,000 layers take ~0.5 GB (``benchmarks/history_scale.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof.history.records import (
    Environment,
    Figure,
    HistoryError,
    LayerPoint,
    RunEntry,
    StoredEnvironment,
    StoredRun,
)
from layerprof.history.series import Window

if TYPE_CHECKING:
    pass

#: 'LPHS' as the file's application_id.
APPLICATION_ID = 0x4C504853
#: The schema this code writes; it reads files of this version and migrates older ones.
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0
DEFAULT_PATH = Path(".layerprof") / "history.db"
_SQLITE_MAGIC = b"SQLite format 3\x00"

_SCHEMA_1 = """
CREATE TABLE envs (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, model TEXT NOT NULL,
    machine TEXT NOT NULL, device TEXT NOT NULL, torch TEXT NOT NULL,
    dtype TEXT NOT NULL, inputs TEXT NOT NULL
);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, env_id INTEGER NOT NULL REFERENCES envs(id),
    commit_sha TEXT NOT NULL, branch TEXT, when_ns INTEGER NOT NULL,
    source TEXT, process INTEGER
);
CREATE INDEX runs_by_env ON runs(env_id, when_ns, id);
CREATE INDEX runs_by_commit ON runs(commit_sha);
CREATE TABLE paths (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE);
CREATE TABLE layer_times (
    run_id INTEGER NOT NULL, path_id INTEGER NOT NULL,
    self_ns INTEGER NOT NULL, total_ns INTEGER NOT NULL,
    self_spread_ns INTEGER, total_spread_ns INTEGER,
    device_self_ns INTEGER, device_total_ns INTEGER,
    device_self_spread_ns INTEGER, device_total_spread_ns INTEGER,
    PRIMARY KEY (run_id, path_id)
) WITHOUT ROWID;
CREATE TABLE figures (
    run_id INTEGER NOT NULL, name TEXT NOT NULL, median_ns INTEGER NOT NULL,
    spread_ns INTEGER, n INTEGER, PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE TABLE latency_samples (run_id INTEGER PRIMARY KEY, samples BLOB NOT NULL);
"""


def _create(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA_1.split(";"):
        if statement.strip():
            conn.execute(statement)


#: ``MIGRATIONS[v]`` takes a file at schema ``v`` to ``v + 1`` (0: a new, empty file).
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_create]

_LAYER_COLUMNS = (
    "self_ns",
    "total_ns",
    "self_spread_ns",
    "total_spread_ns",
    "device_self_ns",
    "device_total_ns",
    "device_self_spread_ns",
    "device_total_spread_ns",
)


class HistoryStore:
    """An open history database; use as a context manager (or ``close()``)."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.path = Path(path)
        self._conn = _connect(self.path, create=create)
        try:
            with self._guard():
                _upgrade(self._conn, self.path)
        except BaseException:
            self._conn.close()
            raise

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """sqlite's errors as one line naming the file."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise HistoryError(
                    f"{self.path}: the history stayed locked by another writer for"
                    f" {BUSY_TIMEOUT_S:.0f} s",
                    hint="try again when the other job has finished adding",
                ) from exc
            if "readonly" in str(exc) or "unable to open" in str(exc):
                raise HistoryError(
                    f"{self.path}: cannot write the history or its log beside it (sqlite: {exc})",
                    hint="the file and its folder must be writable (the write-ahead log lives there)",
                ) from exc
            raise _damaged(self.path, exc) from exc
        except sqlite3.DatabaseError as exc:
            raise _damaged(self.path, exc) from exc

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._guard():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                if self._conn.in_transaction:  # sqlite may have rolled back already
                    self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # ---------------------------------------------------------------- writing

    def add(self, entries: Iterable[RunEntry]) -> list[int]:
        """Add the runs in one transaction (all or none); their ids."""
        ids = []
        with self._transaction() as conn:
            paths = dict(conn.execute("SELECT path, id FROM paths"))
            for entry in entries:
                ids.append(_insert(conn, entry, paths))
        return ids

    # ---------------------------------------------------------------- reading

    def environments(self) -> list[StoredEnvironment]:
        """Every environment with its number of runs, the most recently run first."""
        with self._guard():
            rows = self._conn.execute(
                "SELECT e.model, e.machine, e.device, e.torch, e.dtype, e.inputs,"
                " COUNT(r.id), MAX(r.when_ns) FROM envs e JOIN runs r ON r.env_id = e.id"
                " GROUP BY e.id ORDER BY MAX(r.when_ns) DESC, MAX(r.id) DESC"
            ).fetchall()
        return [StoredEnvironment(_env(row[:6]), row[6], row[7]) for row in rows]

    def run_count(self) -> int:
        with self._guard():
            return int(self._conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def window(self, env: Environment, last: int) -> Window:
        """The newest ``last`` runs of ``env`` as series (see ``Window``)."""
        with self._guard():
            return self._window(env, last)

    def _window(self, env: Environment, last: int) -> Window:
        import numpy as np

        conn = self._conn
        env_row = conn.execute("SELECT id FROM envs WHERE key = ?", (env.key,)).fetchone()
        if env_row is None:
            raise HistoryError(f"{self.path}: no runs of environment {env.key}")
        rows = conn.execute(
            "SELECT id, commit_sha, branch, when_ns, source, process FROM runs"
            " WHERE env_id = ? ORDER BY when_ns DESC, id DESC LIMIT ?",
            (env_row[0], last),
        ).fetchall()[::-1]
        total = conn.execute("SELECT COUNT(*) FROM runs WHERE env_id = ?", env_row).fetchone()[0]
        runs = tuple(StoredRun(r[0], r[1], r[2], r[3], env.key, r[4], r[5]) for r in rows)
        column = {run.id: i for i, run in enumerate(runs)}
        ids = ",".join(str(run.id) for run in runs) or "NULL"  # integers from the file itself
        figures: dict[str, Any] = {}
        for run_id, name, median in conn.execute(
            f"SELECT run_id, name, median_ns FROM figures WHERE run_id IN ({ids})"
        ):
            figures.setdefault(name, np.full(len(runs), np.nan))[column[run_id]] = median
        return _layer_window(conn, env, runs, total, figures, ids, column)

    def runs(self) -> list[tuple[StoredRun, Environment]]:
        """Every run with its environment, oldest first."""
        with self._guard():
            rows = self._conn.execute(
                "SELECT r.id, r.commit_sha, r.branch, r.when_ns, r.source, r.process,"
                " e.model, e.machine, e.device, e.torch, e.dtype, e.inputs"
                " FROM runs r JOIN envs e ON e.id = r.env_id ORDER BY r.when_ns, r.id"
            ).fetchall()
        out = []
        for row in rows:
            env = _env(row[6:])
            out.append((StoredRun(row[0], row[1], row[2], row[3], env.key, row[4], row[5]), env))
        return out

    def figures_of(self, run_id: int) -> list[Figure]:
        with self._guard():
            rows = self._conn.execute(
                "SELECT name, median_ns, spread_ns, n FROM figures WHERE run_id = ? ORDER BY name",
                (run_id,),
            ).fetchall()
        return [Figure(*row) for row in rows]

    def layers_of(self, run_id: int) -> list[LayerPoint]:
        with self._guard():
            rows = self._conn.execute(
                f"SELECT p.path, {', '.join('t.' + c for c in _LAYER_COLUMNS)} FROM layer_times t"
                " JOIN paths p ON p.id = t.path_id WHERE t.run_id = ? ORDER BY t.path_id",
                (run_id,),
            ).fetchall()
        return [LayerPoint(*row) for row in rows]

    def latency_samples(self, run_id: int) -> tuple[int, ...] | None:
        import numpy as np

        with self._guard():
            row = self._conn.execute(
                "SELECT samples FROM latency_samples WHERE run_id = ?", (run_id,)
            ).fetchone()
        return None if row is None else tuple(np.frombuffer(row[0], dtype="<i8").tolist())


def _layer_window(
    conn: sqlite3.Connection,
    env: Environment,
    runs: tuple[StoredRun, ...],
    total: int,
    figures: dict[str, Any],
    ids: str,
    column: dict[int, int],
) -> Window:
    """The layer matrices of the runs ``ids``. Each run's rows come back as one text
    per column (``group_concat`` in the table's (run, path) order, NULL as -1): 100
    texts parse (numpy's C reader) in 5 ms where 100,000 row tuples took 0.45 s."""
    import numpy as np

    names = dict(conn.execute("SELECT id, path FROM paths"))
    parts: list[tuple[int, Any, Any]] = []
    for run_id, *texts in conn.execute(
        "SELECT run_id, group_concat(path_id), group_concat(self_ns), group_concat(total_ns),"
        " group_concat(coalesce(device_self_ns, -1)), group_concat(coalesce(device_total_ns, -1))"
        f" FROM layer_times WHERE run_id IN ({ids}) GROUP BY run_id"
    ):
        values = np.stack([np.fromstring(t, dtype=np.int64, sep=",") for t in texts])
        parts.append((column[run_id], values[0], values[1:].astype(np.float64)))
    if not parts:
        empty = np.zeros((0, len(runs)))
        return Window(env, runs, total, figures, (), empty, empty.copy())
    path_ids = np.unique(np.concatenate([p[1] for p in parts]))
    paths = tuple(names[int(p)] for p in path_ids)
    cube = np.full((4, len(paths), len(runs)), np.nan)
    for col, pids, values in parts:
        cube[:, np.searchsorted(path_ids, pids), col] = values
    cube[2:][cube[2:] < 0] = np.nan  # no device time recorded
    device = not np.all(np.isnan(cube[2]))
    return Window(
        env,
        runs,
        total,
        figures,
        paths,
        cube[0],
        cube[1],
        cube[2] if device else None,
        cube[3] if device else None,
    )


def _insert(conn: sqlite3.Connection, entry: RunEntry, paths: dict[str, int]) -> int:
    env = entry.env
    conn.execute(
        "INSERT OR IGNORE INTO envs (key, model, machine, device, torch, dtype, inputs)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            env.key,
            env.model,
            env.machine,
            env.device,
            env.torch,
            env.dtype,
            json.dumps(list(env.inputs)),
        ),
    )
    (env_id,) = conn.execute("SELECT id FROM envs WHERE key = ?", (env.key,)).fetchone()
    cursor = conn.execute(
        "INSERT INTO runs (env_id, commit_sha, branch, when_ns, source, process)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (env_id, entry.commit, entry.branch, entry.when_ns, entry.source, entry.process),
    )
    run_id = cursor.lastrowid
    assert run_id is not None
    for layer in entry.layers:
        if layer.path not in paths:
            paths[layer.path] = (
                conn.execute("INSERT INTO paths (path) VALUES (?)", (layer.path,)).lastrowid or 0
            )
    conn.executemany(
        f"INSERT INTO layer_times (run_id, path_id, {', '.join(_LAYER_COLUMNS)})"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(run_id, paths[x.path], *(getattr(x, c) for c in _LAYER_COLUMNS)) for x in entry.layers],
    )
    conn.executemany(
        "INSERT INTO figures (run_id, name, median_ns, spread_ns, n) VALUES (?, ?, ?, ?, ?)",
        [(run_id, f.name, f.median_ns, f.spread_ns, f.n) for f in entry.figures],
    )
    if entry.latency_samples_ns:
        import numpy as np

        blob = np.asarray(entry.latency_samples_ns, dtype="<i8").tobytes()
        conn.execute("INSERT INTO latency_samples VALUES (?, ?)", (run_id, blob))
    return run_id


def _env(row: Sequence[Any]) -> Environment:
    model, machine, device, torch, dtype, inputs = row
    return Environment(model, machine, device, torch, dtype, tuple(json.loads(inputs)))


def _damaged(path: Path, exc: sqlite3.Error) -> HistoryError:
    return HistoryError(
        f"{path}: damaged history database (sqlite: {exc})",
        hint="restore it from a backup, or start a new one with --db",
    )


def _connect(path: Path, *, create: bool) -> sqlite3.Connection:
    """A connection to an existing layerprof history, or to a new file when ``create``."""
    _check_header(path, create=create)
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HistoryError(f"{path}: cannot create the history's folder ({exc})") from exc
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise HistoryError(f"{path}: cannot open the history ({exc})") from exc
    return conn


def _check_header(path: Path, *, create: bool) -> None:
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        if create:
            return
        raise HistoryError(
            f"{path}: no history database there",
            hint="add runs first: layerprof history add PROFILE --commit SHA (or --db PATH)",
        ) from None
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read the history ({exc.strerror or exc})") from exc
    if head and head != _SQLITE_MAGIC:
        raise HistoryError(f"{path}: not a layerprof history database (not an SQLite file)")


def _upgrade(conn: sqlite3.Connection, path: Path) -> None:
    """Check the file's identity and version; migrate it to ``SCHEMA_VERSION``."""
    conn.execute("BEGIN")  # one read: another process may be creating the file meanwhile
    try:
        app, version = _identity(conn)
        if app == APPLICATION_ID and version == SCHEMA_VERSION:
            conn.execute("COMMIT")
            _settings(conn)
            return
        _check_identity(conn, path, app, version)  # before changing a foreign file's journal
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode=WAL")  # persistent: set once, outside a transaction
    conn.execute("BEGIN IMMEDIATE")
    try:
        app, version = _identity(conn)  # another process may have migrated meanwhile
        _check_identity(conn, path, app, version)
        for step in MIGRATIONS[version:SCHEMA_VERSION]:
            step(conn)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    _settings(conn)


def _identity(conn: sqlite3.Connection) -> tuple[int, int]:
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    return int(app), int(version)


def _check_identity(conn: sqlite3.Connection, path: Path, app: int, version: int) -> None:
    if app == 0 and version == 0:
        tables = conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
        if tables:
            raise HistoryError(
                f"{path}: an SQLite database of another application, not a layerprof history"
            )
        return
    if app != APPLICATION_ID:
        raise HistoryError(
            f"{path}: an SQLite database of another application (application_id {app:#x}),"
            " not a layerprof history"
        )
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"{path}: a history of schema {version}, newer than this layerprof reads"
            f" ({SCHEMA_VERSION})",
            hint="upgrade layerprof",
        )


def _settings(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA synchronous=FULL")  # a commit survives the process, and a power cut
    conn.execute("PRAGMA foreign_keys=ON")
