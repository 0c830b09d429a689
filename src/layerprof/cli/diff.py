"""``layerprof diff``: compare two saved profiles or traces, or two ``run`` argument
strings profiled in interleaved rounds (``--run``); exit 1 on a regression with
``--fail-above``. No torch unless ``--run`` (and then only in the child processes)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from layerprof.cli import outputs, sources
from layerprof.cli.emission import console, inert_document, say
from layerprof.cli.options import COUNT, NON_NEGATIVE, parse_percent, seconds_arg
from layerprof.errors import UsageError

#: diff --run's default limit for one process (generous: a big model on a CPU takes minutes)
_ROUND_TIMEOUT_S = 1800.0

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile

NAME = "diff"


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        NAME,
        parents=[common],
        help="compare two profiles or traces; exit 1 on a regression with --fail-above",
    )
    parser.add_argument(
        "base", metavar="BASE", help="saved profile (run --json) or trace; with --run, run arguments"
    )  # fmt: skip
    parser.add_argument(
        "new", metavar="NEW", help="saved profile (run --json) or trace; with --run, run arguments"
    )  # fmt: skip
    parser.add_argument(
        "--run", action="store_true",
        help="BASE and NEW are 'layerprof run' argument strings (e.g. '--arch m:Net --input 8x64'):"
        " profile both in interleaved rounds of separate processes, so drift cancels",
    )  # fmt: skip
    parser.add_argument(
        "--rounds", type=COUNT, default=None, metavar="N",
        help="with --run: rounds of one base and one new process each (default 10)",
    )  # fmt: skip
    parser.add_argument(
        "--round-timeout", type=seconds_arg, default=_ROUND_TIMEOUT_S, metavar="SECONDS",
        help="with --run: the longest one process may take before it is stopped and the diff"
        " fails naming its side and round (default %(default)g)",
    )  # fmt: skip
    parser.add_argument(
        "--threshold",
        default="5%",
        metavar="PCT",
        help="smallest relative change reported as significant (default 5%%)",
    )
    parser.add_argument(
        "--fail-above",
        metavar="PCT",
        help="exit 1 if a compared time regressed by more than PCT beyond noise",
    )
    parser.add_argument(
        "--fail-metric",
        choices=("any", "latency", "layers", "ops"),
        default="any",
        help="what the gate looks at (default any: latency, layers, a generate's prefill and"
        " decode, and noise-tested ops)",
    )
    parser.add_argument(
        "--format",
        choices=("console", "json", "md"),
        default="console",
        help="what to print on stdout",
    )
    parser.add_argument(
        "--top", type=COUNT, default=20, metavar="N", help="rows per table (default 20)"
    )
    parser.add_argument(
        "--rank", type=NON_NEGATIVE, metavar="N", help="rank to compare in multi-rank traces"
    )
    out = parser.add_argument_group("output", outputs.STDOUT_HELP)
    outputs.add_output(out, "--json", "write the diff (schema layerprof.diff/1)")
    outputs.add_output(out, "--html", "write a self-contained HTML report of the diff")
    out.add_argument(
        "--quiet", "-q", action="store_true",
        help="print nothing but errors and, with --fail-above, the verdict (exit code for CI)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Compare BASE with NEW; exit 1 when --fail-above finds a regression."""
    from layerprof import sinks
    from layerprof.analysis.diff import diff
    from layerprof.analysis.gate import gate as gate_of
    from layerprof.cli import inputfiles

    threshold = parse_percent(args.threshold, "--threshold")
    fail_above = parse_percent(args.fail_above, "--fail-above") if args.fail_above else None
    printed = f"--format {args.format}" if args.format != "console" else None
    sides = _sides(args) if args.run else None
    if sides is not None:  # what each side's processes read: its model, @inputs, --arch
        inputs = [path for _, parsed in sides for path in inputfiles.model_inputs(parsed)]
    else:
        inputs = [*inputfiles.trace_inputs(args.base), *inputfiles.trace_inputs(args.new)]
    outputs.check_outputs(args, stdout_taken=printed, inputs=inputs)
    if sides is not None:
        base, new = _interleaved(args, [argv for argv, _ in sides])
    elif args.rounds is not None:
        raise UsageError(
            "--rounds is for --run", hint="diff --run 'BASE ARGS' 'NEW ARGS' --rounds N"
        )
    else:
        sources.local_files([args.base, args.new], "diff")  # before a long analysis of BASE
        limit = args.max_input_size
        base, said_base = sources.load_comparable(args.base, rank=args.rank, max_input_size=limit)
        new, said_new = sources.load_comparable(args.new, rank=args.rank, max_input_size=limit)
        for line in (*said_base, *said_new) if not args.quiet else ():
            say(f"layerprof: {line}")
    result = diff(base, new, threshold_pct=threshold)
    gate = gate_of(result, fail_above, args.fail_metric) if fail_above is not None else None
    if args.quiet:
        pass
    elif args.format == "console":
        sinks.show(result, console=console(args), top=args.top, gate=gate)
    else:
        fmt = "md" if args.format == "md" else "json"
        text = sinks.render(result, fmt, top=args.top if fmt == "md" else None, gate=gate)
        text = text.decode() if isinstance(text, bytes) else text
        sys.stdout.write(inert_document(text, fmt))  # names in it are file content
    written = [
        sinks.write(result, path, fmt, gate=gate)
        for fmt in ("json", "html")
        if (path := outputs.target(args, fmt))
    ]
    outputs.report_written(written, args)
    if gate is None:
        return 0
    if args.format != "console" or args.quiet:  # the console report ends with the verdict
        say(f"layerprof: {gate.message}")
    return 1 if gate.failed else 0


def _sides(args: argparse.Namespace) -> list[tuple[list[str], argparse.Namespace]]:
    """diff --run's BASE and NEW: each run command line, and ``run``'s parse of it."""
    import shlex

    from layerprof.cli import processes

    sides = []
    for name, text in (("BASE", args.base), ("NEW", args.new)):
        processes.check_argv([text], f"diff --run {name}")
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise UsageError(f"diff --run {name}: {exc}", hint="quote it as one argument") from None
        if words[:1] == ["run"]:
            words = words[1:]
        if not words:
            raise UsageError(
                f"diff --run {name} is empty", hint="e.g. '--arch pkg.mod:Net --input 8x64'"
            )
        parsed = _no_gate_options(name, words)
        sides.append((["run", *words], parsed))
    return sides


def _interleaved(args: argparse.Namespace, argvs: list[list[str]]) -> tuple[Profile, Profile]:
    """diff --run: BASE and NEW are run argument strings, profiled in alternating rounds."""
    from layerprof.cli import processes

    rounds = 10 if args.rounds is None else args.rounds
    if rounds < 2:
        raise UsageError("--rounds must be at least 2 for a paired comparison")
    tell = None if args.quiet else (lambda line: say(f"layerprof: {line}"))
    return processes.interleave(argvs[0], argvs[1], rounds, say=tell, timeout=args.round_timeout)


def _no_gate_options(name: str, words: list[str]) -> argparse.Namespace:
    """Parse a side's words with ``run``'s own parser (prefixes, ``--opt=value`` and all)
    and refuse what the gate owns, by the parsed destination: output files (every round
    would write, and overwrite, them; diff writes only its own), ``--repeat`` (the rounds
    are the repeats) and the children's own ``--child-out``."""
    from layerprof.cli import run as run_command

    parsed, defaults, flags = run_command.parse_words(words, f"diff --run {name}")
    owned = [
        flag
        for dest, flag in flags.items()
        if (dest.startswith(outputs.PREFIX) or dest in ("repeat", "child_out"))
        and getattr(parsed, dest, None) != getattr(defaults, dest, None)
    ]
    if owned:
        what = ", ".join(owned)
        raise UsageError(
            f"diff --run {name}: {what} is decided by diff, not by each round's process",
            hint="give diff's own outputs after the two strings (diff --run BASE NEW --json"
            " d.json); --rounds sets how many processes run",
        )
    return parsed
