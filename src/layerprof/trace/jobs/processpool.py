"""The ``processes`` executor: a local pool of worker processes (see
:mod:`layerprof.trace.jobs.executors`). Apart from the executors' module so that a
single trace's ``analyze`` never imports ``multiprocessing`` and
``concurrent.futures`` (about 16 ms of every start)."""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.context import ForkServerContext, ForkServerProcess, set_spawning_popen
from typing import Any, Generic, TypeVar

from layerprof.pivot.notes import Note
from layerprof.trace.jobs.tasks import Call, Failed, cores, death_causes, reason_of, signals_held

T = TypeVar("T")
R = TypeVar("R")
STARTED, FINISHED = 1, 2  # an item's state in the pool's shared array


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
        _STATE[index] = STARTED
        out = Call(self.fn)(item)
        _STATE[index] = FINISHED
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
                            f" ({death_causes()})"
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
                with signals_held():  # a submit may start a worker: see signals_held
                    pending = {pool.submit(task, i, items[i]): i for i in todo}
            except (OSError, EOFError) as exc:  # no process could start: a process limit
                # (EAGAIN here, or in the forkserver, which then hangs up: EOFError)
                why = (
                    "the forkserver could not fork" if isinstance(exc, EOFError) else reason_of(exc)
                )
                text = f"worker processes could not start ({why}): the ranks ran here"
                note = Note("no-worker-processes", text, {"why": why})
                if note not in self.notes:  # one per cause, however many rounds hit it
                    self.notes.append(note)
                call = Call(fn)
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
                        if state[i] == STARTED:  # it was running when a worker died
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
        if broken and not any(state[i] == STARTED for i in broken):
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
    lives in importable modules (``layerprof.trace.jobs.rankjobs.RankJob``), so the
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
