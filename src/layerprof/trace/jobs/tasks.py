"""What every executor shares: the outcome of one item (a result or :class:`Failed`),
the call that turns an exception into one, and what a worker's death is put down
to. Apart from :mod:`layerprof.trace.jobs.executors` so that the process pool
(:mod:`layerprof.trace.jobs.processpool`, imported only when one is used) and the
executors reach it without a circle."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from layerprof.errors import LayerprofError

T = TypeVar("T")
R = TypeVar("R")


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


def reason_of(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class Call(Generic[T, R]):
    """``fn(item)`` with its exception turned into a Failed (pickled to the worker)."""

    fn: Callable[[T], R]

    def __call__(self, item: T) -> R | Failed:
        try:
            return self.fn(item)
        except LayerprofError as exc:  # one line that names the file already
            return Failed(str(exc), exc)
        except Exception as exc:  # a worker reports, never crashes: the others go on
            return Failed(reason_of(exc))


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
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


def death_causes() -> str:
    """Why a worker process may die, the likeliest first: where only ``spawn`` exists
    (no forkserver), a fresh worker imports the script again, and an unguarded
    analyze() call fails in it; forkserver workers never import it (_MainlessPopen)."""
    import sys

    causes = "killed, out of memory, or a crash in native code"
    import multiprocessing

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
