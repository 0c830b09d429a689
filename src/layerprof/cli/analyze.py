"""``layerprof analyze``: a torch.profiler trace (or one per rank) into a Run; no torch."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from layerprof.cli import outputs
from layerprof.cli.emission import console
from layerprof.cli.options import COUNT, seconds_arg

NAME = "analyze"


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        NAME,
        parents=[common],
        help="analyze a torch.profiler trace (.json, .json.gz or a directory of ranks)",
    )
    parser.add_argument(
        "trace",
        metavar="TRACE",
        help="a trace file (.json, .json.gz), a directory or glob of them (one per rank),"
        " or an fsspec URL naming one: s3://, gs://, az://, https://, file://",
    )
    parser.add_argument(
        "--executor",
        metavar="NAME",
        help="where the ranks are analyzed: serial, processes[=N] (one worker process per"
        " core; the default for several files big enough to repay its ~1 s start-up), dask (a local Dask cluster, one worker per"
        " core) or dask=ADDRESS (a running scheduler, e.g. tcp://host:8786)",
    )
    parser.add_argument(
        "--timeout",
        type=seconds_arg,
        metavar="SECONDS",
        help="with an http(s):// URL: how long the server may take to connect or to send"
        " the next bytes before the read fails, naming the URL (default 30)",
    )
    parser.add_argument(
        "--partial",
        action="store_true",
        help="when some ranks fail, merge the others and name the failed ones in the notes"
        " (default: fail, naming each with why)",
    )
    parser.add_argument(
        "--capture",
        action="append",
        metavar="CAPTURE",
        help="a trace recorded while the replayed CUDA/HIP graph was captured (repeatable:"
        " one per batch size): each replayed kernel goes to the layer, op and shapes whose"
        " launch made it. A folder TRACE holding one replay and capture_traces/ (with"
        " execution_details.json) is paired without it",
    )
    out = parser.add_argument_group("output", outputs.STDOUT_HELP)
    outputs.add_output(out, "--json", "write the analysis (schema layerprof.trace/2)")
    outputs.add_output(out, "--html", "write a self-contained HTML report")
    parser.add_argument(
        "--top", type=COUNT, default=10, metavar="N", help="rows per table (default 10)"
    )
    parser.add_argument(
        "--group-by-shape", action="store_true", help="group operators by input shapes"
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    parser.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also print this process's peak memory (resident; not a pool's worker"
        " processes) on stderr",
    )


def run(args: argparse.Namespace) -> int:
    """Analyze the trace(s) on the chosen executor, write the files, print the report."""
    from layerprof import sinks
    from layerprof.capture.progress import Progress
    from layerprof.cli import inputfiles, readbar
    from layerprof.trace import analyze
    from layerprof.trace.jobs.executors import parse_executor
    from layerprof.trace.jobs.rankjobs import graph_pair

    pair = graph_pair(args.trace, args.capture)
    inputs = [pair[0], *(c.path for c in pair[1])] if pair else []
    outputs.check_outputs(args, inputs=[*inputfiles.trace_inputs(args.trace), *inputs])
    executor = parse_executor(args.executor) if args.executor else None
    shown = sys.stderr.isatty() and not args.quiet
    bar = Progress(enabled=shown, total=0, description="ranks")
    reading = readbar.BytesRead(enabled=shown)
    try:
        analyzed = analyze(
            args.trace, group_by_shape=args.group_by_shape, max_input_size=args.max_input_size,
            executor=executor, progress=bar.update, partial=args.partial, timeout=args.timeout,
            capture=args.capture, read_progress=reading.update,
        )  # fmt: skip
    finally:
        reading.close()
        bar.close()
    written = [
        sinks.write(analyzed, path, fmt)
        for fmt in ("json", "html")
        if (path := outputs.target(args, fmt))
    ]
    outputs.report_written(written, args)
    if not args.quiet:
        sinks.show(analyzed, console=console(args), top=args.top)
    if args.verbose:
        print(readbar.peak_memory(), file=sys.stderr)
    return 0
