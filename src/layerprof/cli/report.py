"""``layerprof report``: re-render a saved profile, trace analysis or diff; no torch."""

from __future__ import annotations

import argparse
from typing import Any

from layerprof.cli import outputs, sources
from layerprof.cli.emission import console, emit
from layerprof.cli.options import add_output_options
from layerprof.errors import UsageError

NAME = "report"


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        NAME,
        parents=[common],
        help="re-render a saved profile (console, CSV, HTML), or a trace analysis or diff as HTML;"
        " no torch needed",
    )
    parser.add_argument(
        "file",
        metavar="FILE",
        nargs="+",
        help="a saved profile, trace analysis or diff; several saved profiles (one per torchrun"
        " rank: p.rank-*.json) are merged into one view of the ranks",
    )
    add_output_options(parser, json=False)


def run(args: argparse.Namespace) -> int:
    """Re-render a saved profile, trace analysis or diff: console, and the files asked for."""
    from layerprof import codec, sinks
    from layerprof.pivot.diff import Diff
    from layerprof.pivot.profile import Profile

    outputs.check_outputs(args, inputs=args.file)
    sources.local_files(args.file, "report")
    if len(args.file) > 1:
        saved: Any = sources.load_ranks(args.file, max_input_size=args.max_input_size)
    else:
        saved = codec.load(args.file[0], max_input_size=args.max_input_size)
    if isinstance(saved, Profile):
        emit(saved, args)
        return 0
    if outputs.target(args, "csv"):
        raise UsageError(
            f"{' '.join(args.file)}: --csv writes the layers of a profile,"
            f" not of a {type(saved).__name__}"
        )
    html_out = outputs.target(args, "html")
    if html_out:
        outputs.report_written(
            [sinks.write(saved, html_out, "html", gate=_saved_gate(saved))], args
        )
    if not args.quiet:
        options = {"gate": saved.gate_result} if isinstance(saved, Diff) else {}
        sinks.show(saved, console=console(args), top=args.top, **options)
    return 0


def _saved_gate(saved: Any) -> Any:
    from layerprof.pivot.diff import Diff

    return saved.gate_result if isinstance(saved, Diff) else None
