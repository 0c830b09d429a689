"""Command line: ``layerprof demo|run|sweep|analyze|diff|report|history``.

One module per command (``add_parser(sub, common)`` and ``run(args) -> int``);
``options`` holds the option groups and argument types they share, ``emission``
what goes to the terminal and how the process ends. Only argparse, the error tree
and these modules are imported at start-up: ``--help``, ``analyze``, ``diff`` and
``report`` never import torch. Every command returns an exit code; a LayerprofError
becomes one line on stderr (plus a hint), exit 2. ``diff`` keeps exit 1 for
"regression found".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Protocol

from layerprof.cli import analyze, demo, diff, history, report, run, sweep
from layerprof.cli.emission import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    closed_pipe,
    end_process,
    say,
    sigterm_as_interrupt,
)
from layerprof.cli.options import root_parser
from layerprof.errors import LayerprofError, Terminated

_DESCRIPTION = """\
Where the time and memory of a PyTorch model go, layer by layer.

  layerprof demo                                   profile the built-in models
  layerprof run ckpt.pth --arch pkg.mod:Net --input 8x3x224x224
  layerprof sweep --arch pkg.mod:Net --input 8x3x224x224 --batch 1,8,32 --dtype float32,bfloat16
  layerprof analyze trace.json.gz                  read a torch.profiler trace
  layerprof diff base.json new.json --fail-above 5%
  layerprof report profile.json --html report.html
  layerprof history add profile.json --commit $(git rev-parse HEAD); layerprof history check
"""


class _Command(Protocol):
    """A command module: its name, its parser, and its body (returning the exit code)."""

    NAME: str

    def add_parser(self, sub: Any, common: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


#: The commands, in the order ``--help`` lists them.
COMMANDS: tuple[_Command, ...] = (demo, run, sweep, analyze, diff, report, history)
_BY_NAME: dict[str, _Command] = {command.NAME: command for command in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    """The whole parser: the top level, then each command's own."""
    parser, common = root_parser(_DESCRIPTION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run its command; the exit code (errors are one line on stderr)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a bad argument (one line, Parser)
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # for run --repeat's children
    try:
        with sigterm_as_interrupt():
            return _BY_NAME[args.command].run(args)
    except BrokenPipeError:
        return closed_pipe()
    except LayerprofError as exc:
        if args.debug:
            raise
        say(f"layerprof: error: {exc}")
        if exc.hint:
            say(f"  hint: {exc.hint}")
        return exc.exit_code
    except Terminated:
        print("layerprof: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("layerprof: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if args.debug:
            raise
        say(f"layerprof: internal error: {type(exc).__name__}: {exc}")
        print("  hint: run again with --debug for the traceback, and report it", file=sys.stderr)
        return 3
    except BaseException as exc:
        if isinstance(exc, SystemExit) and isinstance(exc.__context__, BrokenPipeError):
            return closed_pipe()  # rich turns a closed stdout into SystemExit(1)
        # SystemExit (or another BaseException) from the model's own code: layerprof
        # never raises these itself once the arguments are parsed.
        if args.debug:
            raise
        text = str(exc).strip()
        detail = f": {text.splitlines()[0]}" if text else ""
        say(f"layerprof: error: the model's code raised {type(exc).__name__}{detail}")
        return EXIT_ERROR


def entry() -> None:
    """The ``layerprof`` command: :func:`main`, then the process ends (see
    ``emission.end_process``: at once after a command that loaded torch)."""
    end_process(main())
