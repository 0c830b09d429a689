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

import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from layerprof.errors import UsageError
from layerprof.trace.jobs.tasks import Call, Executor, Failed, cores, reason_of

T = TypeVar("T")
R = TypeVar("R")

_EXECUTORS = ("serial", "processes", "dask")


class SerialExecutor:
    """Every item in this process, in order."""

    name = "serial"

    def run(
        self, fn: Callable[[T], R], items: Sequence[T], labels: Sequence[str]
    ) -> Iterator[tuple[int, R | Failed]]:
        call = Call(fn)
        for i, item in enumerate(items):
            yield i, call(item)


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
                why = str(exc) if isinstance(exc, _NoScheduler) else reason_of(exc)
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
        call = Call(fn)
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


class _NoScheduler(OSError):
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
        raise _NoScheduler(
            f"it accepted the connection but gave no Dask handshake within {seconds:g} s"
            " (not a Dask scheduler?)"
        ) from exc
    if isinstance(exc, OSError):
        raise exc
    raise _NoScheduler(f"it did not answer as a Dask scheduler ({reason_of(exc)})") from exc


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


def _restore_sigint(previous: Any) -> None:
    import signal

    if previous is not None:
        signal.signal(signal.SIGINT, previous)


def _key(index: int, label: str, token: str) -> str:
    """A Dask task key that names the rank's file (dashboards and errors show it)."""
    return f"layerprof-{index}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)[-80:]}-{token}"


def _dask_reason(exc: BaseException) -> str:
    if type(exc).__name__ == "KilledWorker":
        return (
            "the Dask workers running it died, and the scheduler gave up on it"
            " (killed, out of memory, or a crash in native code)"
        )
    return reason_of(exc)


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
        from layerprof.trace.jobs.processpool import ProcessExecutor

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
    from layerprof.trace.jobs.processpool import ProcessExecutor

    if seconds is None:
        return ProcessExecutor()
    serial = sum(seconds)
    pooled = POOL_START_SECONDS + max(max(seconds), serial / min(cores(), n_items))
    return ProcessExecutor() if pooled < serial else SerialExecutor()
