"""Executors under signals and bad addresses (issue 27, items 7 to 9): SIGTERM ends a run
as Ctrl-C does (workers ended, no temporary file, exit 143), a Ctrl-C with Dask prints
one line, and a Dask address that is not a scheduler fails in seconds, as one line.

Every run is a child process with a timeout; a port that never answers is a socket
on 127.0.0.1 served by a thread of this test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from layerprof.errors import UsageError
from layerprof.trace.jobs.executors import parse_executor
from tests.support.rank_traces import cpu_trace, simulate_ranks

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")

RANKS = 64
SECONDS = 300  # a bound, never reached by a run that works: a hang fails instead
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(sys.path),
    "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s",
}


@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 ranks of a 30-step trace: tens of seconds on two workers, time to kill a run."""
    one = cpu_trace(tmp_path_factory.mktemp("one") / "trace.json", steps=30)
    folder = tmp_path_factory.mktemp("ranks")
    simulate_ranks(one, folder, RANKS)
    return folder


@pytest.fixture(scope="module")
def long_rank_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 ranks of a 300-step trace: seconds of work for two Dask workers after they
    start (the 30-step ranks were done before a signal sent 1 s after the start)."""
    one = cpu_trace(tmp_path_factory.mktemp("one-long") / "trace.json", steps=300)
    folder = tmp_path_factory.mktemp("ranks-long")
    simulate_ranks(one, folder, RANKS)
    return folder


def default_signals() -> None:
    """In the child before exec: SIGINT and SIGTERM as a terminal's job has them, whatever
    this test process inherited (an ignored SIGINT survives exec, and Python then keeps
    it ignored: the child would never hear the Ctrl-C these tests send)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start(*args: str) -> subprocess.Popen[str]:
    """``layerprof ARGS`` in its own process group (as a terminal's foreground job)."""
    return subprocess.Popen(
        [sys.executable, "-m", "layerprof", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        start_new_session=True,
        preexec_fn=default_signals,
    )


def processes() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, state)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # gone meanwhile
                continue
            fields = text.rsplit(")", 1)[1].split()
            out[int(entry)] = (int(fields[1]), fields[0])
    return out


def descendants(pid: int) -> set[int]:
    table = processes()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, (parent, _) in table.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    table = processes()
    return {p for p in pids if p in table and table[p][1] != "Z"}


def ignores_sigint(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    return False


def wait_for_workers(child: subprocess.Popen[str], at_least: int, dask: bool) -> set[int]:
    """The child's descendants once ``at_least`` run and it listens to Ctrl-C again."""
    deadline = time.monotonic() + SECONDS
    seen: set[int] = set()
    while time.monotonic() < deadline:
        assert child.poll() is None, child.communicate()
        seen |= descendants(child.pid)
        if len(alive(seen)) >= at_least and not (dask and ignores_sigint(child.pid)):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"no {at_least} worker processes after {SECONDS} s")


def ended(child: subprocess.Popen[str], seen: set[int]) -> tuple[int, str]:
    """The child's exit code and stderr; every process it started is gone (bounded wait)."""
    _, err = child.communicate(timeout=SECONDS)
    seen |= descendants(child.pid)  # none now: reparented ones were recorded before
    deadline = time.monotonic() + 60
    while alive(seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(seen), f"left running: {sorted(alive(seen))}"
    return child.returncode, err


def temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ---- item 8: SIGTERM is an interrupt -------------------------------------------------------


def test_sigterm_ends_the_process_pool_and_writes_nothing(rank_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    child = start("analyze", str(rank_dir), "-q", "--executor", "processes=2", "--json", str(out))
    seen = wait_for_workers(child, 3, dask=False)  # the forkserver and two workers
    child.send_signal(signal.SIGTERM)
    code, err = ended(child, seen)
    assert (code, err) == (143, "layerprof: terminated\n")
    assert not out.exists() and temp_files(tmp_path) == []


@pytest.mark.parametrize(("signum", "code", "said"), [
    (signal.SIGTERM, 143, "layerprof: terminated"),
    (signal.SIGINT, 130, "layerprof: interrupted"),
])  # fmt: skip
def test_a_signal_while_the_output_is_written_leaves_no_temp_file(
    rank_dir: Path, tmp_path: Path, signum: int, code: int, said: str
) -> None:
    """The signal comes when half the JSON is in the temporary file. It is raised in the
    writing thread: ``os.kill`` of the own process lets the kernel hand it to any thread
    that does not block it (numpy's BLAS threads), and it was then seen, once in a loaded
    run, to arrive after the write (exit 0)."""
    out = tmp_path / "run.json"
    script = f"""
import os, signal, sys
from layerprof import files
from layerprof.cli import main

opened = files.os.fdopen

class Halfway:
    def __init__(self, handle):
        self.handle = handle
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self.handle.__exit__(*exc)
    def write(self, data):
        self.handle.write(data[: len(data) // 2])
        self.handle.flush()
        signal.raise_signal({int(signum)})
        return self.handle.write(data[len(data) // 2 :])

files.os.fdopen = lambda fd, mode: Halfway(opened(fd, mode))
sys.exit(main(["analyze", {str(rank_dir / "trace.rank-0.json.gz")!r}, "-q", "--json", {str(out)!r}]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=SECONDS,
        env=ENV,
        preexec_fn=default_signals,
    )
    assert (done.returncode, done.stderr) == (code, said + "\n")
    assert not out.exists() and temp_files(tmp_path) == []


# ---- item 9: Ctrl-C with Dask is one line --------------------------------------------------


@pytest.mark.parametrize(("signum", "group", "code", "said"), [
    (signal.SIGINT, True, 130, "layerprof: interrupted"),  # a terminal's Ctrl-C: every process
    (signal.SIGTERM, False, 143, "layerprof: terminated"),  # kill PID: layerprof alone
])  # fmt: skip
@pytest.mark.slow
def test_dask_run_stopped_says_one_line_and_leaves_no_process(
    long_rank_dir: Path, signum: int, group: bool, code: int, said: str
) -> None:
    pytest.importorskip("distributed")
    child = start("analyze", str(long_rank_dir), "-q", "--executor", "dask")
    seen = wait_for_workers(child, 2, dask=True)
    time.sleep(0.3)  # ranks running on the workers
    assert child.poll() is None, "the run ended before the signal: give it more ranks"
    if group:
        os.killpg(child.pid, signum)
    else:
        child.send_signal(signum)
    code_, err = ended(child, seen)
    assert (code_, err) == (code, said + "\n")


# ---- item 7: a Dask address that is not a scheduler ------------------------------------------


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A port on 127.0.0.1 that accepts connections and sends each one ``reply[0]``
    (nothing: a stuck process; a status line: an HTTP server), then never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    reply: list[bytes] = [b""]
    stop = threading.Event()
    conns: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conns.append(conn)
            if reply[0]:
                conn.sendall(reply[0])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], reply
    stop.set()
    thread.join(5)
    for conn in conns:
        conn.close()
    server.close()


@pytest.mark.parametrize(("reply", "why"), [
    (b"", "it accepted the connection but gave no Dask handshake within 2 s"),
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "it did not answer as a Dask"),
])  # fmt: skip
def test_a_port_that_is_not_a_dask_scheduler_fails_in_seconds(
    rank_dir: Path, listener: tuple[int, list[bytes]], reply: bytes, why: str
) -> None:
    pytest.importorskip("distributed")
    port, replies = listener
    replies[0] = reply
    address = f"tcp://127.0.0.1:{port}"
    child = start("analyze", str(rank_dir / "trace.rank-0.json.gz"), "-q", "--executor",
                  f"dask={address}")  # fmt: skip
    code, err = ended(child, set())
    lines = err.splitlines()
    assert code == 2, err
    assert lines[0].startswith(f"layerprof: error: cannot reach the Dask scheduler at {address}: ")
    assert why in lines[0]
    assert len(lines) == 2 and lines[1].startswith("  hint: ")


@pytest.mark.parametrize("address", ["http://127.0.0.1:8787", "https://x/", "s3://b/k", "tcp://"])
def test_an_address_dask_cannot_speak_is_a_usage_error(address: str) -> None:
    with pytest.raises(UsageError, match="--executor 'dask="):
        parse_executor(f"dask={address}")


def test_http_address_fails_at_once_as_one_line(rank_dir: Path) -> None:
    child = start("analyze", str(rank_dir), "-q", "--executor", "dask=http://127.0.0.1:8787")
    code, err = ended(child, set())
    assert code == 2
    assert err.splitlines() == [
        "layerprof: error: --executor 'dask=http://127.0.0.1:8787': Dask does not speak http://"
        " (a scheduler's address is tcp://, tls://, ucx://, ws://, wss:// HOST:PORT)",
        "  hint: the scheduler's address, not its dashboard: e.g. tcp://scheduler:8786",
    ]


def test_a_real_scheduler_address_still_works(rank_dir: Path, tmp_path: Path) -> None:
    """The handshake check lets a scheduler through (an in-process one, thread workers)."""
    distributed = pytest.importorskip("distributed")
    from layerprof import codec
    from layerprof.trace import analyze

    folder = tmp_path / "two"
    folder.mkdir()
    for r in range(2):
        name = f"trace.rank-{r}.json.gz"
        (folder / name).write_bytes((rank_dir / name).read_bytes())
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        run = analyze(folder, executor=f"dask={cluster.scheduler_address}")
    same = analyze(folder, executor="serial")
    assert [p.rank for p in run.ranks] == [0, 1]
    assert orjson.dumps({**codec.to_dict(run), "path": ""}) == orjson.dumps(
        {**codec.to_dict(same), "path": ""}
    )


def test_a_signal_during_submit_acts_once_the_workers_are_listed() -> None:
    """SIGTERM or Ctrl-C inside the held block (the pool's submits) is delivered after
    it, to the handler that was there, once; nothing is lost or doubled."""
    from layerprof.trace.jobs.tasks import signals_held

    class Stop(Exception):
        pass

    seen: list[int] = []

    def handler(signum: int, frame: object) -> None:
        seen.append(signum)
        raise Stop

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        reached_end = False
        with pytest.raises(Stop), signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            reached_end = True
        assert reached_end and seen == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is handler
        interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with pytest.raises(KeyboardInterrupt), signals_held():
                os.kill(os.getpid(), signal.SIGINT)
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        finally:
            signal.signal(signal.SIGINT, interrupt)
    finally:
        signal.signal(signal.SIGTERM, previous)
