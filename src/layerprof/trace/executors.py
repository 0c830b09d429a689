"""Where the per-rank work runs: in this process, a local process pool, or Dask.

Every executor runs one picklable function on each item (a rank's trace)
and yields ``(index, outcome)`` as items finish, in any order, so that the
caller can fold results in as they come and drop them: the client holds the
merged results plus the few ranks in flight, never every rank's events. An
outcome is the function's result, or :class:`Failed` with a one-line reason:

* the function raised (a trace that does not parse, a bug): that item fails,
  the others go on;
* a worker process died (killed, out of memory, a crash in native code):
  ``processes`` rebuilds the pool and runs the unfinished items again, and an
  item that was running when a worker died runs once more alone: it fails
  only if its worker dies then too. Dask retries a task whose worker died
  and fails it after ``distributed.scheduler.allowed-failures`` deaths
  (``KilledWorker``). Nothing is dropped
  without a :class:`Failed` naming it, so a merge is never silently partial.

``serial`` runs in this process (one rank, or debugging); ``processes`` is a
``concurrent.futures`` pool of one worker per core (started with
``forkserver`` where there is one: no threads or locks of this process are
copied into workers, and workers never import the caller's ``__main__``, so a
script is not run again; the work must live in an importable module); ``dask`` starts a ``LocalCluster`` with one
single-threaded worker process per core, or connects to a scheduler's
address (the workers must have layerprof installed, and read the traces
themselves: local paths must be visible to them, URLs always are).
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.context import ForkServerContext, ForkServerProcess, set_spawning_popen
from typing import Any, Generic, Protocol, TypeVar

from layerprof.errors import LayerprofError, UsageError
from layerprof.notes import Note

T = TypeVar("T")
R = TypeVar("R")

EXECUTORS = ("serial", "processes", "dask")
_STARTED, _FINISHED = 1, 2


@dataclass(frozen=True)
class Failed:
    """An item that produced no result, and why (one line); ``error`` is the
    LayerprofError it raised (with its hint), when it raised one."""

    reason: str
    error: LayerprofError | None = None


class Executor(Protocol):
    """Runs ``fn`` on every item; yields ``(index, result or Failed)`` as items finish."""

    name: str

    def run(
        self, fn: Callable[[T], R], items: Sequence[T], labels: Sequence[str]
    ) -> Iterator[tuple[int, R | Failed]]: ...


def cores() -> int:
    """CPU cores this process may use (its affinity mask where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class _Call(Generic[T, R]):
    """``fn(item)`` with its exception turned into a Failed (pickled to the worker)."""

    fn: Callable[[T], R]

    def __call__(self, item: T) -> R | Failed:
        try:
            return self.fn(item)
        except LayerprofError as exc:  # one line that names the file already
            return Failed(str(exc), exc)
        except Exception as exc:  # a worker reports, never crashes: the others go on
            return Failed(_reason(exc))


class SerialExecutor:
    """Every item in this process, in order."""

    name = "serial"

    def run(
        self, fn: Callable[[T], R], items: Sequence[T], labels: Sequence[str]
    ) -> Iterator[tuple[int, R | Failed]]:
        call = _Call(fn)
        for i, item in enumerate(items):
            yield i, call(item)


# ---- processes -------------------------------------------------------------------------

_STATE: Any = None  # in a worker: the shared array of item states of its pool


def _init_worker(state: Any) -> None:
    global _STATE
    _STATE = state


@dataclass(frozen=True)
class _Tracked(Generic[T, R]):
    """``fn(item)`` that marks the item started and finished in shared memory, which a
    SIGKILL cannot undo: after a worker dies, the items marked started but not
    finished are the ones it (or another dying worker) was running."""

    fn: Callable[[T], R]

    def __call__(self, index: int, item: T) -> R | Failed:
        _STATE[index] = _STARTED
        out = _Call(self.fn)(item)
        _STATE[index] = _FINISHED
        return out


class ProcessExecutor:
    """A local pool of worker processes, one per core (or ``workers``)."""

    name = "processes"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers
        self.notes: list[Note] = []  # what the user should know about how the ranks ran

    def run(
        self, fn: Callable[[T], R], items: Sequence[T], labels: Sequence[str]
    ) -> Iterator[tuple[int, R | Failed]]:
        self.notes = []  # this run's only: an executor may be reused
        deaths = [0] * len(items)
        todo = list(range(len(items)))
        while todo:
            broken: list[int] = []
            yield from self._round(fn, items, todo, deaths, broken, self.workers)
            todo = [i for i in broken if not deaths[i]]  # cut off with the others: again
            for i in (i for i in broken if deaths[i]):
                # Running when a worker died: run it alone, so a death is its own.
                alone: list[int] = []
                yield from self._round(fn, items, [i], deaths, alone, 1)
                if alone:
                    yield (
                        i,
                        Failed(
                            "its worker process died while analyzing it, also when run alone"
                            f" ({_death_causes()})"
                        ),
                    )

    def _round(
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        todo: list[int],
        deaths: list[int],
        broken: list[int],
        workers: int | None,
    ) -> Iterator[tuple[int, R | Failed]]:
        """One pool over ``todo``; items cut off by a dying worker go to ``broken``
        (and count a death when they were running)."""
        context = _context()
        state = context.RawArray("b", len(items))
        workers = max(1, min(workers or cores(), len(todo)))
        task = _Tracked(fn)
        pool: ProcessPoolExecutor | None = None
        pending: dict[Future[Any], int] = {}
        try:
            try:
                # Both may start a process: the pool's locks the resource tracker,
                # the first submit the forkserver and the workers.
                pool = ProcessPoolExecutor(
                    workers, mp_context=context, initializer=_init_worker, initargs=(state,)
                )
                with _signals_held():  # a submit may start a worker: see _signals_held
                    pending = {pool.submit(task, i, items[i]): i for i in todo}
            except (OSError, EOFError) as exc:  # no process could start: a process limit
                # (EAGAIN here, or in the forkserver, which then hangs up: EOFError)
                why = "the forkserver could not fork" if isinstance(exc, EOFError) else _reason(exc)
                text = f"worker processes could not start ({why}): the ranks ran here"
                note = Note("no-worker-processes", text, {"why": why})
                if note not in self.notes:  # one per cause, however many rounds hit it
                    self.notes.append(note)
                call = _Call(fn)
                for i in todo:
                    yield i, call(items[i])
                return
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    i = pending.pop(future)
                    try:
                        yield i, future.result()
                    except BrokenProcessPool:
                        broken.append(i)
                        if state[i] == _STARTED:  # it was running when a worker died
                            deaths[i] += 1
        except BaseException:
            # Interrupted (Ctrl-C, SIGTERM, the caller closing this generator): end the
            # workers now, not after the ranks they are running (minutes on a big trace).
            if pool is not None:
                _end_workers(pool)
                # Let the pool's own thread fail the pending futures before anything
                # cancels them: cancelling one it is failing raises InvalidStateError in
                # that thread (Python < 3.12), a traceback on the user's terminal.
                pool.shutdown(wait=True, cancel_futures=False)
            raise
        finally:
            for future in pending:
                future.cancel()
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        if broken and not any(state[i] == _STARTED for i in broken):
            # A worker died between marking an item finished and sending it back:
            # no suspect, so every cut-off item takes the blame once (bounded retries).
            for i in broken:
                deaths[i] += 1


def _end_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's worker processes (SIGTERM; they hold no state worth saving)."""
    end = getattr(pool, "terminate_workers", None)  # Python 3.14
    if end is not None:
        end()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError):  # already gone, or already closed
            process.terminate()


def _context() -> Any:
    if "forkserver" in multiprocessing.get_all_start_methods():
        return _MainlessContext()
    return multiprocessing.get_context("spawn")


class _MainlessPopen(popen_forkserver.Popen):
    """A forkserver child that is not told the parent's ``__main__``.

    The stdlib hands every spawned or forkserver child the path of the parent's
    main script, and the child runs it again as ``__mp_main__`` so that functions
    defined there unpickle. For a user's script that calls ``analyze()`` without a
    ``__main__`` guard, that re-ran the script (profiling their model again, and
    writing their output files) in every worker. The work sent to our workers
    lives in importable modules (``layerprof.trace.analysis.RankJob``), so the
    child needs no ``__main__`` at all. This is ``popen_forkserver.Popen._launch``
    (unchanged from 3.10 to 3.13) with the main module left out.
    """

    def _launch(self, process_obj: Any) -> None:
        prep = spawn.get_preparation_data(process_obj._name)
        prep.pop("init_main_from_path", None)
        prep.pop("init_main_from_name", None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        # A duplicate of the data pipe's write end: the child's sentinel of its parent.
        parent_w = os.dup(w)
        close = util.close_fds  # type: ignore[attr-defined]
        self.finalizer = util.Finalize(self, close, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _MainlessProcess(ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _MainlessPopen(process_obj)


class _MainlessContext(ForkServerContext):
    """The forkserver start method, with workers that never import ``__main__``."""

    Process = _MainlessProcess


# ---- dask --------------------------------------------------------------------------------


class DaskExecutor:
    """A Dask cluster: a ``LocalCluster`` of one process per core, or a scheduler's address."""

    name = "dask"

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        self.address = _dask_address(address, f"dask={address}") if address else None
        self.workers = workers

    def run(
        self, fn: Callable[[T], R], items: Sequence[T], labels: Sequence[str]
    ) -> Iterator[tuple[int, R | Failed]]:
        distributed = _import_dask()
        cluster = None
        try:
            if self.address is None:
                cluster = self._local_cluster(distributed, len(items))
            try:
                if self.address is not None:
                    _handshake(distributed, self.address)
                client = distributed.Client(cluster or self.address, set_as_default=False)
            except OSError as exc:  # unreachable address, refused, timed out, not Dask
                why = str(exc) if isinstance(exc, NoScheduler) else _reason(exc)
                raise UsageError(
                    f"cannot reach the Dask scheduler at {self.address or 'its local cluster'}:"
                    f" {why}",
                    hint="check the address (tcp://HOST:8786), or use --executor processes",
                ) from exc
            with client:
                yield from self._gather(client, distributed, fn, items, labels)
        finally:
            if cluster is not None:
                cluster.close()

    def _local_cluster(self, distributed: Any, n_items: int) -> Any:
        """A LocalCluster whose worker processes ignore SIGINT: a Ctrl-C at the terminal
        reaches the whole process group, and each worker would print a traceback; this
        process ends them (``cluster.close``). SIGINT is ignored here while they start
        (a few seconds): a Ctrl-C then is lost, so that no worker outlives a cluster
        that was never returned. A worker the nanny starts later, to replace a dead
        one, is not covered (it would print its traceback on a Ctrl-C)."""
        previous = _ignore_sigint()
        cluster = None
        try:
            cluster = distributed.LocalCluster(
                n_workers=max(1, min(self.workers or cores(), n_items)),
                threads_per_worker=1,  # the reader holds the GIL: one rank per process
                processes=True,
                dashboard_address=None,
                silence_logs=50,  # logging.CRITICAL: a dead worker is reported per rank, and
                # a worker losing its scheduler while the cluster closes is no news
            )
        except BaseException:
            if cluster is not None:
                cluster.close()
            raise
        finally:
            _restore_sigint(previous)
        return cluster

    def _gather(
        self,
        client: Any,
        distributed: Any,
        fn: Callable[[T], R],
        items: Sequence[T],
        labels: Sequence[str],
    ) -> Iterator[tuple[int, R | Failed]]:
        call = _Call(fn)
        token = os.urandom(4).hex()
        futures = {
            client.submit(call, item, key=_key(i, labels[i], token), pure=False): i
            for i, item in enumerate(items)
        }
        try:
            for future, value in distributed.as_completed(
                futures, loop=client.loop, with_results=True, raise_errors=False
            ):
                i = futures.pop(future)
                future.release()  # the client keeps only what it folded in
                if future.status == "error":  # value is (type, exception, traceback)
                    yield i, Failed(_dask_reason(value[1]))
                else:
                    yield i, value
        finally:
            for future in futures:
                future.cancel()


class NoScheduler(OSError):
    """Something answered at a scheduler's address, but not as a Dask scheduler."""


def _handshake(distributed: Any, address: str) -> None:
    """Dask's own connect and handshake with ``address``, bounded in time: OSError when
    no scheduler answers within ``distributed.comm.timeouts.connect`` (30 s by default).

    ``Client(address)`` bounds only the TCP connect: a port whose listener accepts and
    never replies (an HTTP server, a stuck process) would keep it waiting forever.
    """
    import asyncio
    import threading

    from dask.config import get
    from dask.utils import parse_timedelta

    seconds = parse_timedelta(get("distributed.comm.timeouts.connect"), default="seconds")
    _refused_at_once(address, seconds)
    outcome: list[BaseException | None] = []

    async def attempt() -> None:
        comm = await asyncio.wait_for(distributed.comm.connect(address, timeout=seconds), seconds)
        await comm.close()

    def run() -> None:
        try:
            asyncio.run(attempt())
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)

    # Its own thread and loop: the caller may be running an event loop (a notebook).
    thread = threading.Thread(target=run, name="layerprof-dask-handshake", daemon=True)
    thread.start()
    thread.join(seconds + 5)  # the loop's own timeout fires first; this one is a backstop
    exc = outcome[0] if outcome else TimeoutError()
    if exc is None:
        return
    if isinstance(exc, TimeoutError) and not str(exc):
        raise NoScheduler(
            f"it accepted the connection but gave no Dask handshake within {seconds:g} s"
            " (not a Dask scheduler?)"
        ) from exc
    if isinstance(exc, OSError):
        raise exc
    raise NoScheduler(f"it did not answer as a Dask scheduler ({_reason(exc)})") from exc


def _refused_at_once(address: str, seconds: float) -> None:
    """A closed port fails now, as ``ConnectionRefusedError``: Dask's connect retries a
    refused port until its timeout and then reports a timeout (30 s, wrongly worded)."""
    import socket

    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme not in ("tcp", "tls"):
        return
    host, port = parse_host_port(location)
    try:
        socket.create_connection((host, port), timeout=seconds).close()
    except ConnectionRefusedError as exc:
        raise ConnectionRefusedError(f"connection refused by {host}:{port}") from exc
    except OSError:
        return  # unreachable or slow: Dask's own connect says so within its timeout


def _ignore_sigint() -> Any:
    """Ignore SIGINT in this process (processes started meanwhile inherit that, even
    across exec, which a Python handler is not); the handler to restore, or None where
    it cannot be changed (not the main thread)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends, then act as they would have.

    A submit may start a worker; Ctrl-C or SIGTERM inside it, after the
    forkserver forked the worker but before the pool listed it, left a worker
    that nothing terminated: it outlived the pool's locks and printed a
    traceback on the user's terminal as it started. After the block every
    started worker is listed, so the interrupt's clean-up ends it.
    (Only the main thread may change handlers; elsewhere nothing is held.)
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    wanted = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in wanted}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for late in dict.fromkeys(caught):
            signal.raise_signal(late)  # the restored handler acts on it now


def _restore_sigint(previous: Any) -> None:
    import signal

    if previous is not None:
        signal.signal(signal.SIGINT, previous)


def _key(index: int, label: str, token: str) -> str:
    """A Dask task key that names the rank's file (dashboards and errors show it)."""
    return f"layerprof-{index}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)[-80:]}-{token}"


def _death_causes() -> str:
    """Why a worker process may die, the likeliest first: where only ``spawn`` exists
    (no forkserver), a fresh worker imports the script again, and an unguarded
    analyze() call fails in it; forkserver workers never import it (_MainlessPopen)."""
    import sys

    causes = "killed, out of memory, or a crash in native code"
    if "forkserver" in multiprocessing.get_all_start_methods():
        return causes
    main = sys.modules.get("__main__")
    cli = getattr(getattr(main, "entry", None), "__module__", None) == "layerprof.cli"
    if getattr(main, "__file__", None) and getattr(main, "__spec__", None) is None and not cli:
        causes = (
            "in a script: call analyze() under `if __name__ == '__main__':`, since worker"
            f" processes import the script, or pass executor='serial'; else {causes}"
        )
    return causes


def _dask_reason(exc: BaseException) -> str:
    if type(exc).__name__ == "KilledWorker":
        return (
            "the Dask workers running it died, and the scheduler gave up on it"
            " (killed, out of memory, or a crash in native code)"
        )
    return _reason(exc)


def _import_dask() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise UsageError(
            "--executor dask needs dask.distributed, which is not installed",
            hint="pip install 'layerprof[dask]'",
        ) from exc
    return distributed


# ---- choosing one ---------------------------------------------------------------------


def parse_executor(spec: str) -> Executor:
    """``serial``, ``processes[=N]``, ``dask`` or ``dask=ADDRESS`` -> an Executor."""
    name, _, arg = spec.strip().partition("=")
    if name == "serial" and not arg:
        return SerialExecutor()
    if name == "processes":
        return ProcessExecutor(_workers(arg, spec) if arg else None)
    if name == "dask":
        return DaskExecutor(_dask_address(arg, spec) if arg else None)  # named as given
    raise UsageError(
        f"--executor {spec!r}: expected serial, processes[=N], dask or dask=ADDRESS",
        hint="e.g. --executor processes=8 or --executor dask=tcp://scheduler:8786",
    )


#: The address schemes Dask's comms speak (``HOST:PORT`` alone means tcp://).
DASK_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")


def _dask_address(address: str, spec: str) -> str:
    """A scheduler address Dask can connect to; a scheme it does not speak (http://, a
    dashboard's URL) is a usage error now, not a ValueError from inside the client."""
    scheme, sep, rest = address.rpartition("://")
    if sep and scheme.lower() not in DASK_SCHEMES:
        raise UsageError(
            f"--executor {spec!r}: Dask does not speak {scheme}://"
            f" (a scheduler's address is {', '.join(s + '://' for s in DASK_SCHEMES[:5])}"
            " HOST:PORT)",
            hint="the scheduler's address, not its dashboard: e.g. tcp://scheduler:8786",
        )
    if not rest:
        raise UsageError(f"--executor {spec!r}: the Dask scheduler's address has no host")
    return address


def _workers(text: str, spec: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"--executor {spec!r}: the number of worker processes must be >= 1")
    return int(text)


#: What a local pool costs before its first result: starting the forkserver and
#: the workers, each importing layerprof's reader (benchmarks/pool_startup.py;
#: 0.6-0.9 s for one worker on a loaded 2-core machine, about 3 s for two
#: starting side by side at load 8).
POOL_START_SECONDS = 1.0


def default_executor(n_items: int, seconds: Sequence[float] | None = None) -> Executor:
    """``processes`` when a pool pays, else ``serial``.

    ``seconds``: each item's estimated time in this process (None: unknown, such as
    remote files, whose reads overlap well). A pool pays when it finishes sooner:
    its start-up plus the longer of its longest item and the items spread over
    its workers, against every item one after another. Two small traces run here.
    """
    if n_items < 2 or cores() < 2:
        return SerialExecutor()
    if seconds is None:
        return ProcessExecutor()
    serial = sum(seconds)
    pooled = POOL_START_SECONDS + max(max(seconds), serial / min(cores(), n_items))
    return ProcessExecutor() if pooled < serial else SerialExecutor()
