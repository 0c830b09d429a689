"""Command line: ``layerprof demo|run|analyze|diff|report``.

Only argparse and the error tree are imported at start-up: ``--help``,
``analyze``, ``diff`` and ``report`` never import torch. Every command returns
an exit code; a LayerprofError becomes one line on stderr (plus a hint), exit 2.
``diff`` keeps exit 1 for "regression found".
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from layerprof import outputs, sources
from layerprof.errors import LayerprofError, Terminated, UsageError

if TYPE_CHECKING:
    from layerprof.capture.compiled.run import CompileOptions
    from layerprof.capture.ops.profiler import OpOptions
    from layerprof.profile import Profile

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM
EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE: stdout was closed by its reader

DESCRIPTION = """\
Where the time and memory of a PyTorch model go, layer by layer.

  layerprof demo                                   profile the built-in models
  layerprof run ckpt.pth --arch pkg.mod:Net --input 8x3x224x224
  layerprof sweep --arch pkg.mod:Net --input 8x3x224x224 --batch 1,8,32 --dtype float32,bfloat16
  layerprof analyze trace.json.gz                  read a torch.profiler trace
  layerprof diff base.json new.json --fail-above 5%
  layerprof report profile.json --html report.html
"""


def _int_at_least(low: int) -> Any:
    """An argparse type: an integer >= ``low``, with a one-line error otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


_COUNT = _int_at_least(1)
_NON_NEGATIVE = _int_at_least(0)
MAX_INPUT_HELP = (
    "most bytes a JSON or trace input may hold or expand to, e.g. 64G"
    " (default: 16G or half the free memory, whichever is smaller)"
)


def _seconds(text: str) -> float:
    """An argparse type: a positive number of seconds (``30``, ``2.5``)."""
    import math

    try:
        value = float(text.strip().removesuffix("s"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _size(text: str) -> int:
    """An argparse type: a byte size such as 512M or 64G."""
    from layerprof.reading import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _threads(text: str) -> int:
    from layerprof.load.limits import threads_problem

    value = _COUNT(text)
    problem = threads_problem(value)
    if problem is not None:  # torch segfaults on absurd counts rather than refusing
        raise argparse.ArgumentTypeError(problem)
    return int(value)


def _seed(text: str) -> int:
    from layerprof.load.limits import seed_problem

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    problem = seed_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _peak(text: str) -> Any:
    """An argparse type: ``--peak FLOPS[,BYTES]`` per second (``2.5T``, ``312e12,2T``)."""
    from layerprof.capture.flops.peaks import parse_peak

    try:
        return parse_peak(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--peak: ")) from None


def _add_output_options(p: argparse.ArgumentParser, *, json: bool = True) -> None:
    out = p.add_argument_group("output", outputs.STDOUT_HELP)
    if json:
        outputs.add_output(out, "--json", "write the profile as JSON (schema layerprof.profile/2)")
        out.add_argument(
            "--samples",
            action="store_true",
            help="with --json: keep every iteration's times (default: summaries only, which"
            " diff judges without the rank test)",
        )
    outputs.add_output(out, "--csv", "write one CSV line per layer")
    outputs.add_output(out, "--html", "write a self-contained HTML report")
    out.add_argument(
        "--depth",
        type=_NON_NEGATIVE,
        metavar="N",
        help="deepest tree level printed (0 = the model)",
    )
    out.add_argument(
        "--top", type=_COUNT, metavar="N", help="print the N layers with most self time, flat"
    )
    out.add_argument(
        "--sort", choices=("order", "total", "self", "name"), default="order",
        help="order of sibling layers in the tree (default: definition order)",
    )  # fmt: skip
    out.add_argument("--no-shapes", action="store_true", help="hide the input/output shape columns")
    out.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")


def _add_measure_options(p: argparse.ArgumentParser, *, warmup: int, iters: int) -> None:
    m = p.add_argument_group("measurement")
    m.add_argument(
        "--warmup",
        type=_NON_NEGATIVE,
        default=warmup,
        help=f"untimed warm-up forwards after the cold call (default {warmup})",
    )
    m.add_argument(
        "--iters", type=_COUNT, default=iters, help=f"timed forwards per pass (default {iters})"
    )
    m.add_argument(
        "--threads",
        type=_threads,
        metavar="N",
        help="torch.set_num_threads for the run (restored after); at most 4 per CPU",
    )
    m.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    m.add_argument(
        "--dtype",
        choices=("float32", "float16", "bfloat16", "float64"),
        help="cast the model and float inputs",
    )
    m.add_argument(
        "--train", action="store_true", help="keep train mode (default: eval mode for the run)"
    )
    m.add_argument(
        "--no-inference-mode",
        action="store_true",
        help="run under torch.no_grad() instead of inference_mode()",
    )
    m.add_argument("--grad", action="store_true", help="run with autograd enabled")
    m.add_argument(
        "--no-correct",
        action="store_true",
        help="do not subtract the calibrated instrumentation cost (wrappers; --ops: the profiler's per-operator cost) from self times",
    )
    m.add_argument(
        "--seed", type=_seed, default=0, help="seed for random inputs (default 0; 64 bits)"
    )
    m.add_argument(
        "--peak", type=_peak, metavar="FLOPS[,BYTES]",
        help="the device's peak FLOP/s (and bytes/s) for %% of peak and the roofline, e.g."
        " 2.5T,50G (default: measured once per machine on CPU, known GPUs by name)",
    )  # fmt: skip
    m.add_argument(
        "--ddp",
        action="store_true",
        help="under torchrun: wrap the model in DistributedDataParallel (gloo on CPU, NCCL on"
        " CUDA), so --train --backward steps all-reduce gradients; layer paths stay the model's",
    )


def _add_ops_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("operators, backward and trace exports")
    g.add_argument(
        "--ops",
        action="store_true",
        help="ops mode: run torch.profiler and list the operators (and kernels) of every layer",
    )
    g.add_argument(
        "--record-shapes",
        action="store_true",
        help="with --ops: record operator input shapes (an Input shapes column: the shapes"
        " with most time per op)",
    )
    g.add_argument(
        "--group-by-shape",
        action="store_true",
        help="with --ops: group the operator table by input shapes (implies --record-shapes)",
    )
    g.add_argument(
        "--op-sort",
        choices=("self", "total", "device", "calls", "name"),
        default="self",
        help="with --ops: order of the operator tables (default: self time)",
    )
    g.add_argument(
        "--profile-memory",
        action="store_true",
        help="with --ops: record allocator events (CPU Mem / Self CPU Mem columns per op,"
        " each layer's peak memory)",
    )
    g.add_argument(
        "--with-stack",
        action="store_true",
        help="with --ops and --trace/--tensorboard: record Python stacks in the trace file",
    )
    g.add_argument(
        "--with-flops",
        action="store_true",
        help="with --ops: the profiler's FLOP estimate per op (a FLOPs column, 'flops' in JSON)",
    )
    g.add_argument(
        "--schedule",
        metavar="W,WU,A,R",
        help="with --ops: torch.profiler.schedule(wait, warmup, active, repeat); shown in the"
        " report and kept in the profile's meta",
    )
    g.add_argument(
        "--backward",
        action="store_true",
        help="also time each layer's backward (loss = sum of outputs unless --loss)",
    )
    g.add_argument(
        "--loss", metavar="MODULE:CALLABLE", help="with --backward: fn(output) -> loss tensor"
    )
    outputs.add_output(
        g,
        "--trace",
        "with --ops or --compile: write a Chrome/Perfetto trace (.json or .json.gz) with a lane"
        " of layer spans",
    )
    outputs.add_output(
        g,
        "--tensorboard",
        "with --ops or --compile: write a tensorboard_trace_handler-style trace directory",
    )
    outputs.add_output(g, "--stacks", "write layer self times as folded stacks (flamegraph.pl)")
    outputs.add_output(g, "--speedscope", "write the layer tree as a speedscope profile")


def _list_of(parse: Any, what: str) -> Any:
    """An argparse type: a comma-separated list of ``parse``-d values (``1,8,32``)."""

    def parse_list(text: str) -> tuple[Any, ...]:
        items = [t.strip() for t in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what} separated by commas")
        values = tuple(parse(t) for t in items)
        if len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"{text!r}: a value is given twice")
        return values

    parse_list.__name__ = f"list of {what}"
    return parse_list


def _dtype_name(text: str) -> str:
    if text not in DTYPES:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(DTYPES)}")
    return text


DTYPES = ("float32", "float16", "bfloat16", "float64")


def _add_model_options(p: argparse.ArgumentParser, *, example_inputs: bool = True) -> None:
    """MODEL, --arch and how the model file is read, and --input (run, sweep); a .pt2
    program's own example inputs stand in for --input with ``example_inputs``."""
    p.add_argument(
        "model", nargs="?", metavar="MODEL", help="model file (.pth/.pt/.pt2/TorchScript)"
    )
    load = p.add_argument_group("model")
    load.add_argument(
        "--arch",
        metavar="MODULE:CALLABLE",
        help="class or factory that builds the model, e.g. mypkg.nets:ResNetish",
    )
    load.add_argument(
        "--arch-kwargs", metavar="JSON", help="keyword arguments for --arch as a JSON object"
    )
    load.add_argument(
        "--non-strict", action="store_true", help="load state_dict keys that match, ignore the rest"
    )
    load.add_argument(
        "--trust-pickle", action="store_true",
        help="allow files that unpickle objects or carry native code (a whole pickled module, a .pt2 with pickled weights, an AOTInductor package): this runs code from the file, only use it for files you trust (SECURITY.md)",
    )  # fmt: skip
    exported = "; a .pt2 program defaults to its example inputs" if example_inputs else ""
    p.add_argument(
        "--input", "-i", action="append", default=[], metavar="SPEC",
        help="input spec, repeatable: 1x3x224x224, 4x128:int64[0,30000), 2x8:bfloat16, :bool,"
        f" name=SPEC (keyword), @file.pt{exported}",
    )  # fmt: skip


#: ``layerprof.sections.sweep``'s DEFAULT_ITERS and DEFAULT_WARMUP (tests/test_startup.py
#: keeps them equal): importing that module here would load every section at --help
SWEEP_ITERS, SWEEP_WARMUP = 20, 3


def _add_sweep_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    DEFAULT_ITERS, DEFAULT_WARMUP = SWEEP_ITERS, SWEEP_WARMUP
    sweep = sub.add_parser(
        "sweep",
        parents=[common],
        help="the same model over batch sizes, dtypes and thread counts",
        description="Run the same model at every combination of --batch, --dtype and --threads"
        " (any subset): latency percentiles, throughput, FLOP/s, peak memory and each layer's"
        " share of the forward per point. The batch replaces dimension --batch-dim (default 0)"
        " of every --input shape spec; inputs with fewer dimensions stay as they are. A point"
        " that runs out of memory ends its row: larger batches of the same dtype and threads"
        " are skipped, and the report says where.",
    )
    _add_model_options(sweep, example_inputs=False)
    grid = sweep.add_argument_group("grid")
    grid.add_argument(
        "--batch", type=_list_of(_COUNT, "batch sizes"), default=(), metavar="N[,N...]",
        help="batch sizes, e.g. 1,8,32,128 (default: the inputs as given)",
    )  # fmt: skip
    grid.add_argument(
        "--dtype", type=_list_of(_dtype_name, "dtypes"), default=(), metavar="DTYPE[,DTYPE...]",
        help=f"model and float input dtypes, of {', '.join(DTYPES)} (default: the model's own)",
    )  # fmt: skip
    grid.add_argument(
        "--threads", type=_list_of(_threads, "thread counts"), default=(), metavar="N[,N...]",
        help="torch.set_num_threads per point, e.g. 1,2 (default: torch's own)",
    )  # fmt: skip
    grid.add_argument(
        "--batch-dim", type=_NON_NEGATIVE, default=0, metavar="D",
        help="the dimension of each --input shape the batch replaces (default 0; 1 for"
        " sequence-first inputs)",
    )  # fmt: skip
    m = sweep.add_argument_group("measurement")
    m.add_argument("--warmup", type=_NON_NEGATIVE, default=DEFAULT_WARMUP,
                   help=f"untimed forwards per point after its cold call (default {DEFAULT_WARMUP})")  # fmt: skip
    m.add_argument("--iters", type=_COUNT, default=DEFAULT_ITERS,
                   help=f"timed forwards per pass and point (default {DEFAULT_ITERS})")  # fmt: skip
    m.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    m.add_argument(
        "--seed", type=_seed, default=0, help="seed for random inputs (default 0; 64 bits)"
    )
    m.add_argument(
        "--train", action="store_true", help="keep train mode (default: eval mode for the run)"
    )
    m.add_argument(
        "--no-inference-mode", action="store_true",
        help="run under torch.no_grad() instead of inference_mode()",
    )  # fmt: skip
    m.add_argument(
        "--no-layers", action="store_true",
        help="latency only: skip each point's per-layer pass (no layer shares, no FLOPs)",
    )  # fmt: skip
    m.add_argument("--no-memory", action="store_true", help="skip each point's peak-memory forward")
    out = sweep.add_argument_group("output", outputs.STDOUT_HELP)
    outputs.add_output(out, "--json", "write the sweep (schema layerprof.sweep/1)")
    outputs.add_output(out, "--html", "write a self-contained HTML report with the charts")
    out.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")


def _add_compile_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("torch.compile (docs/compile.md)")
    g.add_argument(
        "--compile",
        action="store_true",
        help="run the model through torch.compile (inductor) and attribute the compiled kernels'"
        " time to layers",
    )
    g.add_argument(
        "--compile-mode",
        choices=("default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune"),
        help="with --compile: inductor's mode (default: default; the CUDA-graph modes are refused)",
    )
    g.add_argument(
        "--dynamic", action="store_true", help="with --compile: torch.compile(dynamic=True)"
    )
    g.add_argument(
        "--compile-split",
        choices=("cost", "lca", "equal"),
        help="with --compile: how a fused kernel spanning several layers is split: by its nodes'"
        " FLOPs/elements (cost, the default), all to their common ancestor (lca), or evenly",
    )


class _Parser(argparse.ArgumentParser):
    """argparse, with argument errors in layerprof's one-line form instead of the
    whole usage text (twenty lines for ``run``) above the one line that matters."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"layerprof: error: {message}\n  hint: see {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    from layerprof.version import __version__

    parser = _Parser(
        prog="layerprof",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"layerprof {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--max-input-size", type=_size, metavar="SIZE", help=MAX_INPUT_HELP)
    # --debug is accepted after the subcommand too; SUPPRESS keeps the main value.
    common = _Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    common.add_argument(
        "--max-input-size",
        type=_size,
        default=argparse.SUPPRESS,
        metavar="SIZE",
        help=MAX_INPUT_HELP,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="profile the built-in example models on CPU",
        description="Profile the built-in example models (a small CNN and a small transformer encoder) on CPU. With several models, output files get the model name inserted (report.html -> report.cnn.html).",
    )
    demo.add_argument(
        "--model",
        choices=("all", "cnn", "transformer"),
        default="all",
        help="which built-in model (default: both)",
    )
    _add_measure_options(demo, warmup=3, iters=20)
    _add_ops_options(demo)
    _add_compile_options(demo)
    _add_output_options(demo)

    run = sub.add_parser(
        "run",
        parents=[common], help="profile a model file or an --arch callable",
        description="Profile one forward pass of a model, layer by layer. MODEL is a state_dict/checkpoint "
        "file (needs --arch), a TorchScript archive, a torch.export .pt2 file, or a pickled module "
        "(needs --trust-pickle). Without MODEL, --arch builds the model with random weights.",
    )  # fmt: skip
    _add_model_options(run)
    _add_measure_options(run, warmup=5, iters=50)
    run.add_argument(
        "--repeat", type=_COUNT, default=1, metavar="N",
        help="profile in N separate processes and keep each one's medians in the profile, so"
        " that diff judges changes on the run-to-run spread (default 1; see docs/diff.md)",
    )  # fmt: skip
    run.add_argument("--child-out", metavar="PATH", help=argparse.SUPPRESS)  # --repeat's children
    _add_ops_options(run)
    _add_compile_options(run)
    _add_output_options(run)

    _add_sweep_parser(sub, common)

    analyze = sub.add_parser(
        "analyze",
        parents=[common],
        help="analyze a torch.profiler trace (.json, .json.gz or a directory of ranks)",
    )
    analyze.add_argument(
        "trace",
        metavar="TRACE",
        help="a trace file (.json, .json.gz), a directory or glob of them (one per rank),"
        " or an fsspec URL naming one: s3://, gs://, az://, https://, file://",
    )
    analyze.add_argument(
        "--executor",
        metavar="NAME",
        help="where the ranks are analyzed: serial, processes[=N] (one worker process per"
        " core; the default for several files big enough to repay its ~1 s start-up), dask (a local Dask cluster, one worker per"
        " core) or dask=ADDRESS (a running scheduler, e.g. tcp://host:8786)",
    )
    analyze.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="with an http(s):// URL: how long the server may take to connect or to send"
        " the next bytes before the read fails, naming the URL (default 30)",
    )
    analyze.add_argument(
        "--partial",
        action="store_true",
        help="when some ranks fail, merge the others and name the failed ones in the notes"
        " (default: fail, naming each with why)",
    )
    out = analyze.add_argument_group("output", outputs.STDOUT_HELP)
    outputs.add_output(out, "--json", "write the analysis (schema layerprof.trace/2)")
    outputs.add_output(out, "--html", "write a self-contained HTML report")
    analyze.add_argument(
        "--top", type=_COUNT, default=10, metavar="N", help="rows per table (default 10)"
    )
    analyze.add_argument(
        "--group-by-shape", action="store_true", help="group operators by input shapes"
    )
    analyze.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")

    diff = sub.add_parser(
        "diff",
        parents=[common],
        help="compare two profiles or traces; exit 1 on a regression with --fail-above",
    )
    diff.add_argument(
        "base", metavar="BASE", help="saved profile (run --json) or trace; with --run, run arguments"
    )  # fmt: skip
    diff.add_argument(
        "new", metavar="NEW", help="saved profile (run --json) or trace; with --run, run arguments"
    )  # fmt: skip
    diff.add_argument(
        "--run", action="store_true",
        help="BASE and NEW are 'layerprof run' argument strings (e.g. '--arch m:Net --input 8x64'):"
        " profile both in interleaved rounds of separate processes, so drift cancels",
    )  # fmt: skip
    diff.add_argument(
        "--rounds", type=_COUNT, default=None, metavar="N",
        help="with --run: rounds of one base and one new process each (default 10)",
    )  # fmt: skip
    diff.add_argument(
        "--threshold",
        default="5%",
        metavar="PCT",
        help="smallest relative change reported as significant (default 5%%)",
    )
    diff.add_argument(
        "--fail-above",
        metavar="PCT",
        help="exit 1 if a compared time regressed by more than PCT beyond noise",
    )
    diff.add_argument(
        "--fail-metric",
        choices=("any", "latency", "layers", "ops"),
        default="any",
        help="what the gate looks at (default any: latency, layers, and noise-tested ops)",
    )
    diff.add_argument(
        "--format",
        choices=("console", "json", "md"),
        default="console",
        help="what to print on stdout",
    )
    diff.add_argument(
        "--top", type=_COUNT, default=20, metavar="N", help="rows per table (default 20)"
    )
    diff.add_argument(
        "--rank", type=_NON_NEGATIVE, metavar="N", help="rank to compare in multi-rank traces"
    )
    out = diff.add_argument_group("output", outputs.STDOUT_HELP)
    outputs.add_output(out, "--json", "write the diff (schema layerprof.diff/1)")
    outputs.add_output(out, "--html", "write a self-contained HTML report of the diff")
    out.add_argument(
        "--quiet", "-q", action="store_true",
        help="print nothing but errors and, with --fail-above, the verdict (exit code for CI)",
    )  # fmt: skip

    report = sub.add_parser(
        "report",
        parents=[common],
        help="re-render a saved profile (console, CSV, HTML), or a trace analysis or diff as HTML;"
        " no torch needed",
    )
    report.add_argument(
        "file",
        metavar="FILE",
        nargs="+",
        help="a saved profile, trace analysis or diff; several saved profiles (one per torchrun"
        " rank: p.rank-*.json) are merged into one view of the ranks",
    )
    _add_output_options(report, json=False)
    return parser


# ---- commands ----------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from layerprof.load.demo import DEMOS, build

    names = list(DEMOS) if args.model == "all" else [args.model]
    outputs.check_outputs(args, suffixes=names if len(names) > 1 else [None])
    for name in names:
        model = build(name)
        label = f"demo {name} ({type(model).__name__})"
        profile = _measure(model, DEMOS[name][1], args, model_name=label)
        _emit(profile, args, suffix=name if len(names) > 1 else None)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    if args.child_out:
        return _run_child(args)
    outputs.check_outputs(args)
    _compile_options(args)  # a bad combination fails before a long load
    if args.repeat > 1:
        return _run_repeated(args)
    loaded = _load(args)
    profile = _measure(
        loaded.module,
        args.input,
        args,
        model_name=loaded.name,
        kind=loaded.kind,
        notes=loaded.notes,
        program=loaded.program,
    )
    _emit(profile, args)
    return 0


def _run_child(args: argparse.Namespace) -> int:
    """One process of --repeat or diff --run: the profile (with samples) to --child-out."""
    args.quiet = True
    loaded = _load(args)
    profile = _measure(
        loaded.module, args.input, args, model_name=loaded.name, kind=loaded.kind,
        notes=loaded.notes, program=loaded.program,
    )  # fmt: skip
    profile.save(args.child_out, samples=True)
    return 0


def _run_repeated(args: argparse.Namespace) -> int:
    from layerprof import processes

    for flag in ("trace", "tensorboard"):
        if outputs.target(args, flag):
            raise UsageError(f"--{flag} writes one process's trace; it does not go with --repeat")
    say = None if args.quiet else (lambda line: _say(f"layerprof: {line}"))
    argv = getattr(args, "argv", None) or sys.argv[1:]  # main() keeps the command line
    profile = processes.repeat(argv, args.repeat, say=say)
    _emit(profile, args)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from layerprof.sweepcmd import sweep_command

    return sweep_command(args, load=lambda: _load(args))


def _load(args: argparse.Namespace) -> Any:
    """The model of ``run``/``sweep`` (MODEL file and/or --arch), checked before a long load."""
    import json

    from layerprof.load.model import load_model

    if not args.model and not args.arch:
        raise UsageError(
            "give a MODEL file, --arch MODULE:CALLABLE, or both",
            hint=f"see layerprof {args.command} --help",
        )
    kwargs = None
    if args.arch_kwargs:
        try:
            kwargs = json.loads(args.arch_kwargs)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--arch-kwargs is not valid JSON: {exc.msg}") from exc
        if not isinstance(kwargs, dict):
            raise UsageError("--arch-kwargs must be a JSON object, e.g. '{\"depth\": 18}'")
    # fail before a long load unless the file is an export archive carrying example inputs
    if not args.input and not _is_export_archive(args.model):
        raise _no_input()
    loaded = load_model(
        args.model, arch=args.arch, arch_kwargs=kwargs, strict=not args.non_strict,
        trust_pickle=args.trust_pickle, map_location="cpu",
    )  # fmt: skip
    if not args.input and loaded.kind != "export":
        raise _no_input()
    return loaded


def _is_export_archive(model: str | None) -> bool:
    """Told by the file's content, never its name (a .pt2 renamed .pth is one)."""
    from layerprof.load.formats import torch_file_format

    if model is None or not Path(model).is_file():
        return False
    try:
        return torch_file_format(Path(model)) == "export"
    except OSError:
        return True  # let the loader report the unreadable file


def _no_input() -> UsageError:
    return UsageError(
        "no --input given", hint="e.g. --input 1x3x224x224 (repeat for more arguments)"
    )


def _measure(
    model: Any,
    input_specs: Sequence[str],
    args: argparse.Namespace,
    *,
    model_name: str,
    kind: str = "eager",
    notes: Sequence[str] = (),
    program: Any = None,
) -> Profile:
    from layerprof.capture.device import prepare_model, resolve_device
    from layerprof.capture.distributed import ddp_wrapped
    from layerprof.capture.options import RunOptions
    from layerprof.capture.runner import run_model
    from layerprof.load.inputs import build_inputs, example_inputs
    from layerprof.load.modulegraph import check_acyclic

    check_acyclic(model)  # before .to(): it recurses forever on a looping tree
    ops = _op_options(args)
    loss = _loss(args)
    device = resolve_device(args.device)
    model = prepare_model(model, device, args.dtype)
    if input_specs:
        inputs = build_inputs(
            list(input_specs), device=device, float_dtype=args.dtype, seed=args.seed
        )
    else:  # a torch.export program carries the inputs it was exported with
        inputs = example_inputs(program, device=device, float_dtype=args.dtype)
    options = RunOptions(
        warmup=args.warmup, iters=args.iters, device=device, threads=args.threads,
        eval=not args.train, inference_mode=not args.no_inference_mode, grad=args.grad,
        correct_overhead=not args.no_correct, progress=sys.stderr.isatty() and not args.quiet,
        model_name=model_name, input_descriptions=tuple(inputs.descriptions),
        dtype=args.dtype, ops=ops, backward=args.backward, loss=loss, kind=kind,
        compile=_compile_options(args), meta_extra={"kind": kind}, peak=args.peak,
    )  # fmt: skip
    with ddp_wrapped(model, device, enabled=getattr(args, "ddp", False)) as model:
        profile = run_model(
            model, tuple(inputs.args), dict(inputs.kwargs), options, program=program
        )
    return profile.with_notes(*notes) if notes else profile


def _compile_options(args: argparse.Namespace) -> CompileOptions | None:
    """--compile and its options; the options without --compile are a usage error."""
    from layerprof.capture.compiled.run import CompileOptions

    if not args.compile:
        given = {"--compile-mode": args.compile_mode, "--dynamic": args.dynamic,
                 "--compile-split": args.compile_split}  # fmt: skip
        named = [flag for flag, value in given.items() if value]
        if named:
            raise UsageError(f"{named[0]} needs --compile", hint="add --compile")
        return None
    return CompileOptions(
        mode=args.compile_mode or "default",
        dynamic=True if args.dynamic else None,
        split=args.compile_split or "cost",
    )


def _op_options(args: argparse.Namespace) -> OpOptions | None:
    """--ops and the torch.profiler options; the options without --ops are a usage error."""
    from layerprof.capture.ops.profiler import OpOptions

    flags = {
        "--record-shapes": args.record_shapes or args.group_by_shape,
        "--profile-memory": args.profile_memory,
        "--with-stack": args.with_stack,
        "--with-flops": args.with_flops,
        "--schedule": args.schedule,
        "--trace": outputs.target(args, "trace"),
        "--tensorboard": outputs.target(args, "tensorboard"),
    }
    if not args.ops:
        if args.compile:  # a compiled run records a trace of its own for these
            flags.pop("--trace")
            flags.pop("--tensorboard")
        given = [flag for flag, value in flags.items() if value]
        if given:
            raise UsageError(f"{given[0]} needs --ops", hint="add --ops to record operators")
        return None
    if args.with_stack and not (flags["--trace"] or flags["--tensorboard"]):
        raise UsageError(
            "--with-stack records Python stacks into the trace file, and no trace is written",
            hint="add --trace FILE or --tensorboard DIR",
        )
    return OpOptions(
        record_shapes=bool(flags["--record-shapes"]),
        profile_memory=args.profile_memory,
        with_stack=args.with_stack,
        with_flops=args.with_flops,
        schedule=_schedule(args.schedule) if args.schedule else None,
    )


def _schedule(text: str) -> tuple[int, int, int, int]:
    parts = text.split(",")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 4 or any(v < 0 for v in values):
        raise UsageError(
            f"--schedule {text!r}: expected four non-negative integers wait,warmup,active,repeat",
            hint="e.g. --schedule 1,1,3,1",
        )
    return values[0], values[1], values[2], values[3]


def _loss(args: argparse.Namespace) -> Any:
    if not args.loss:
        return None
    if not args.backward:
        raise UsageError("--loss needs --backward")
    from layerprof.load.specs import import_callable

    return import_callable(args.loss, option="--loss")


def _emit(profile: Profile, args: argparse.Namespace, *, suffix: str | None = None) -> None:
    """Write the requested files (each whole or not at all), then print the report."""
    from layerprof import sinks
    from layerprof.capture.distributed import rank_info

    # Files first: a measurement that took minutes is saved before anything else can fail.
    outputs.write_profile_outputs(profile, args, suffix=suffix)
    info = rank_info()
    if not args.quiet and (info is None or info.rank == 0):  # torchrun: one report, not N
        sinks.show(
            profile, console=_console(args), depth=args.depth,
            top=args.top, sort=args.sort, shapes=not args.no_shapes,
            op_sort=getattr(args, "op_sort", "self"),
            group_by_shape=getattr(args, "group_by_shape", False),
        )  # fmt: skip


def _console(args: argparse.Namespace) -> Any:
    """The report's console: standard error when an output goes to standard output."""
    from layerprof.render.terminal import make_console

    return make_console(stderr=outputs.to_stdout(args))


def cmd_analyze(args: argparse.Namespace) -> int:
    from layerprof import sinks
    from layerprof.capture.progress import Progress
    from layerprof.trace import analyze
    from layerprof.trace.executors import parse_executor

    outputs.check_outputs(args)
    executor = parse_executor(args.executor) if args.executor else None
    bar = Progress(enabled=sys.stderr.isatty() and not args.quiet, total=0, description="ranks")
    try:
        run = analyze(
            args.trace, group_by_shape=args.group_by_shape, max_input_size=args.max_input_size,
            executor=executor, progress=bar.update, partial=args.partial, timeout=args.timeout,
        )  # fmt: skip
    finally:
        bar.close()
    written = [
        sinks.write(run, path, fmt)
        for fmt in ("json", "html")
        if (path := outputs.target(args, fmt))
    ]
    outputs.report_written(written, args)
    if not args.quiet:
        sinks.show(run, console=_console(args), top=args.top)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from layerprof import sinks
    from layerprof.analysis.diff import diff, parse_percent

    threshold = parse_percent(args.threshold)
    fail_above = parse_percent(args.fail_above) if args.fail_above else None
    printed = f"--format {args.format}" if args.format != "console" else None
    outputs.check_outputs(args, stdout_taken=printed)
    if args.run:
        base, new = _interleaved(args)
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
            _say(f"layerprof: {line}")
    result = diff(base, new, threshold_pct=threshold)
    gate = result.gate(fail_above, args.fail_metric) if fail_above is not None else None
    if args.quiet:
        pass
    elif args.format == "console":
        sinks.show(result, console=_console(args), top=args.top, gate=gate)
    else:
        fmt = "md" if args.format == "md" else "json"
        text = sinks.render(result, fmt, top=args.top if fmt == "md" else None, gate=gate)
        text = text.decode() if isinstance(text, bytes) else text
        sys.stdout.write(_inert_document(text, fmt))  # names in it are file content
    written = [
        sinks.write(result, path, fmt, gate=gate)
        for fmt in ("json", "html")
        if (path := outputs.target(args, fmt))
    ]
    outputs.report_written(written, args)
    if gate is None:
        return 0
    if args.format != "console" or args.quiet:  # the console report ends with the verdict
        _say(f"layerprof: {gate.message}")
    return 1 if gate.failed else 0


def _interleaved(args: argparse.Namespace) -> tuple[Profile, Profile]:
    """diff --run: BASE and NEW are run argument strings, profiled in alternating rounds."""
    import shlex

    from layerprof import processes

    argvs = []
    for name, text in (("BASE", args.base), ("NEW", args.new)):
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
        _no_child_outputs(name, words)
        argvs.append(["run", *words])
    rounds = 10 if args.rounds is None else args.rounds
    if rounds < 2:
        raise UsageError("--rounds must be at least 2 for a paired comparison")
    say = None if args.quiet else (lambda line: _say(f"layerprof: {line}"))
    return processes.interleave(argvs[0], argvs[1], rounds, say=say)


#: run's file options: a --run child's profile goes to diff, never to a file of its own
_CHILD_OUTPUTS = frozenset(
    f"--{name}" for name in (*(o for o, _ in outputs.RENDERED_OUTPUTS), "tensorboard")
)


def _no_child_outputs(name: str, words: list[str]) -> None:
    """Refuse output options inside BASE/NEW: every round would write (and overwrite)
    them, and diff writes only its own outputs, so they would be dropped unseen."""
    given = sorted({w.split("=", 1)[0] for w in words} & _CHILD_OUTPUTS)
    if given:
        raise UsageError(
            f"diff --run {name}: {', '.join(given)} would be written by every round's process",
            hint="give diff's own outputs after the two strings (diff --run BASE NEW --json d.json)",
        )


def cmd_report(args: argparse.Namespace) -> int:
    """Re-render a saved profile, trace analysis or diff: console, and the files asked for."""
    from layerprof import codec, sinks
    from layerprof.analysis.diff import Diff
    from layerprof.profile import Profile

    outputs.check_outputs(args)
    sources.local_files(args.file, "report")
    if len(args.file) > 1:
        saved: Any = sources.load_ranks(args.file, max_input_size=args.max_input_size)
    else:
        saved = codec.load(args.file[0], max_input_size=args.max_input_size)
    if isinstance(saved, Profile):
        _emit(saved, args)
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
        sinks.show(saved, console=_console(args), top=args.top, **options)
    return 0


def _saved_gate(saved: Any) -> Any:
    from layerprof.analysis.diff import Diff

    return saved.gate_result if isinstance(saved, Diff) else None


COMMANDS = {
    "demo": cmd_demo,
    "run": cmd_run,
    "sweep": cmd_sweep,
    "analyze": cmd_analyze,
    "diff": cmd_diff,
    "report": cmd_report,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a bad argument (one line, _Parser)
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # for run --repeat's children
    try:
        with _sigterm_as_interrupt():
            return COMMANDS[args.command](args)
    except BrokenPipeError:
        return _closed_pipe()
    except LayerprofError as exc:
        if args.debug:
            raise
        _say(f"layerprof: error: {exc}")
        if exc.hint:
            _say(f"  hint: {exc.hint}")
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
        _say(f"layerprof: internal error: {type(exc).__name__}: {exc}")
        print("  hint: run again with --debug for the traceback, and report it", file=sys.stderr)
        return 3
    except BaseException as exc:
        if isinstance(exc, SystemExit) and isinstance(exc.__context__, BrokenPipeError):
            return _closed_pipe()  # rich turns a closed stdout into SystemExit(1)
        # SystemExit (or another BaseException) from the model's own code: layerprof
        # never raises these itself once the arguments are parsed.
        if args.debug:
            raise
        text = str(exc).strip()
        detail = f": {text.splitlines()[0]}" if text else ""
        _say(f"layerprof: error: the model's code raised {type(exc).__name__}{detail}")
        return EXIT_ERROR


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
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


def _closed_pipe() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as a shell tool killed
    by SIGPIPE does (exit 141); stdout goes to /dev/null so the final flush cannot fail."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_CLOSED_PIPE


def _escape(text: str, *, keep_newlines: bool = False) -> str:
    from layerprof.render.terminal import escape_controls

    return escape_controls(text, keep_newlines=keep_newlines)


def _inert_document(text: str, fmt: str) -> str:
    """A JSON or Markdown document for stdout, control characters escaped in the
    document's own syntax (JSON: ``\\u009b``, which keeps it valid)."""
    from layerprof.render.terminal import escape_json

    return escape_json(text) if fmt == "json" else _escape(text, keep_newlines=True)


def _say(line: str) -> None:
    """One line on stderr; names from files in it cannot drive the terminal."""
    print(_escape(line), file=sys.stderr)


def entry() -> None:
    sys.exit(main())
