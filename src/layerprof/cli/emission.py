"""What the commands write to the terminal, and how the process ends.

The report of a profile (files first, then the console), lines on standard error
with control characters escaped, documents for standard output, a closed stdout
(``| head``) and SIGTERM; the exit codes ``main`` returns for them.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from layerprof.cli import outputs
from layerprof.errors import Terminated

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM
_EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE: stdout was closed by its reader


def emit(profile: Profile, args: argparse.Namespace, *, suffix: str | None = None) -> None:
    """Write the requested files (each whole or not at all), then print the report."""
    from layerprof import sinks
    from layerprof.capture.platform.distributed import rank_info

    # Files first: a measurement that took minutes is saved before anything else can fail.
    outputs.write_profile_outputs(profile, args, suffix=suffix)
    info = rank_info()
    if not args.quiet and (info is None or info.rank == 0):  # torchrun: one report, not N
        sinks.show(
            profile, console=console(args), depth=args.depth,
            top=args.top, sort=args.sort, shapes=not args.no_shapes,
            op_sort=getattr(args, "op_sort", "self"),
            group_by_shape=getattr(args, "group_by_shape", False),
        )  # fmt: skip


def console(args: argparse.Namespace) -> Any:
    """The report's console: standard error when an output goes to standard output."""
    from layerprof.render.terminal import make_console

    return make_console(stderr=outputs.to_stdout(args))


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a scheduler's timeout) ends a command as Ctrl-C does, with its
    clean-up, instead of at once leaving worker processes and temporary files behind.
    Raised once: a second SIGTERM during the clean-up does not cut it short."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread (an embedding program's)
        return
    said: list[int] = []

    def terminate(signum: int, frame: object) -> None:
        if not said:
            said.append(signum)
            raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        if previous is not None:  # None: a handler not set from Python, left as it was
            signal.signal(signal.SIGTERM, previous)


def closed_pipe() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as a shell tool killed
    by SIGPIPE does (exit 141); stdout goes to /dev/null so the final flush cannot fail."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return _EXIT_CLOSED_PIPE


def end_process(code: int) -> NoReturn:
    """Leave the process with ``code``; after a command that loaded torch, at once.

    torch's OpenMP pool (libgomp) and numpy's OpenBLAS pool each shut down in the C
    library's exit handlers, and they can deadlock there: OpenBLAS's
    ``blas_thread_shutdown_`` joined a thread parked in libgomp's barrier, and a
    finished ``layerprof run`` waited forever (about one run in eight of a BERT-like
    model under load; OpenBLAS's own fix, skipping the clean-up when the process is
    exiting anyway, covers Windows only). Once the command is done, its files are
    renamed into place and the streams are flushed, nothing is left for those
    handlers to do: the process ends with ``os._exit``, skipping them (and Python's
    ``atexit`` handlers, a model's own included; logging is flushed first).
    Commands that never import torch (``analyze``, ``diff``, ``report``) exit as
    usual: their worker pools are closed by ``atexit``."""
    import os

    if "torch" not in sys.modules:
        sys.exit(code)
    if "logging" in sys.modules:
        import logging

        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (| head), a closed stream
            code = code or _EXIT_CLOSED_PIPE
    os._exit(code)


def escape(text: str, *, keep_newlines: bool = False) -> str:
    from layerprof.render.terminal import escape_controls

    return escape_controls(text, keep_newlines=keep_newlines)


def inert_document(text: str, fmt: str) -> str:
    """A JSON or Markdown document for stdout, control characters escaped in the
    document's own syntax (JSON: ``\\u009b``, which keeps it valid)."""
    from layerprof.render.terminal import escape_json

    return escape_json(text) if fmt == "json" else escape(text, keep_newlines=True)


def say(line: str) -> None:
    """One line on stderr; names from files in it cannot drive the terminal."""
    print(escape(line), file=sys.stderr)
