"""The parser's shared parts: argument types and the option groups several commands take.

``root_parser`` is the top-level parser (``--version``, ``--debug``, ``--max-input-size``)
and the parent every command's parser takes for the options accepted after the command
too. Nothing here imports torch or a section: the types import what they check with
when an argument is parsed.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, NoReturn

from layerprof.cli import outputs
from layerprof.cli.emission import EXIT_ERROR
from layerprof.errors import UsageError


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


COUNT = _int_at_least(1)
NON_NEGATIVE = _int_at_least(0)
_MAX_INPUT_HELP = (
    "most bytes a JSON or trace input may hold or expand to, e.g. 64G"
    " (default: 16G or half the memory this process may still allocate, ulimit -v"
    " included, whichever is smaller)"
)


def seconds_arg(text: str) -> float:
    """An argparse type: a positive number of seconds (``30``, ``2.5``)."""
    import math

    try:
        value = float(text.strip().removesuffix("s"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def parse_percent(text: str, flag: str = "") -> float:
    """``'5%'``, ``'5'``, ``'0.5 %'`` -> a percentage as a float; UsageError otherwise
    (naming ``flag`` when given). Here, not beside the diff analysis, so a command that
    only reads a percentage (``history check``) does not import the diff."""
    cleaned = text.strip().removesuffix("%").strip()
    try:
        value = float(cleaned)
    except ValueError:
        value = math.nan
    if not cleaned or not math.isfinite(value) or value < 0:
        raise UsageError(
            f"{flag + ' ' if flag else ''}{text!r} is not a percentage",
            hint="write a number >= 0, with or without '%', e.g. 5% or 0.5",
        )
    return value


def _size_arg(text: str) -> int:
    """An argparse type: a byte size such as 512M or 64G."""
    from layerprof.reading import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def threads_arg(text: str) -> int:
    from layerprof.load.limits import threads_problem

    value = COUNT(text)
    problem = threads_problem(value)
    if problem is not None:  # torch segfaults on absurd counts rather than refusing
        raise argparse.ArgumentTypeError(problem)
    return int(value)


def seed_arg(text: str) -> int:
    from layerprof.load.limits import seed_problem

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    problem = seed_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _peak_arg(text: str) -> Any:
    """An argparse type: ``--peak FLOPS[,BYTES]`` per second (``2.5T``, ``312e12,2T``)."""
    from layerprof.capture.options import parse_peak

    try:
        return parse_peak(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--peak: ")) from None


def add_output_options(p: argparse.ArgumentParser, *, json: bool = True) -> None:
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
        type=NON_NEGATIVE,
        metavar="N",
        help="deepest tree level printed (0 = the model)",
    )
    out.add_argument(
        "--top", type=COUNT, metavar="N", help="print the N layers with most self time, flat"
    )
    out.add_argument(
        "--sort", choices=("order", "total", "self", "name"), default="order",
        help="order of sibling layers in the tree (default: definition order)",
    )  # fmt: skip
    out.add_argument("--no-shapes", action="store_true", help="hide the input/output shape columns")
    out.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")


def add_measure_options(p: argparse.ArgumentParser, *, warmup: int, iters: int) -> None:
    m = p.add_argument_group("measurement")
    m.add_argument(
        "--warmup",
        type=NON_NEGATIVE,
        default=warmup,
        help=f"untimed warm-up forwards after the cold call (default {warmup})",
    )
    m.add_argument(
        "--iters", type=COUNT, default=iters, help=f"timed forwards per pass (default {iters})"
    )
    m.add_argument(
        "--threads",
        type=threads_arg,
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
        "--seed", type=seed_arg, default=0, help="seed for random inputs (default 0; 64 bits)"
    )
    m.add_argument(
        "--peak", type=_peak_arg, metavar="FLOPS[,BYTES]",
        help="the device's peak FLOP/s (and bytes/s) for %% of peak and the roofline, e.g."
        " 2.5T,50G (default: measured once per machine on CPU, known GPUs by name)",
    )  # fmt: skip
    m.add_argument(
        "--ddp",
        action="store_true",
        help="under torchrun: wrap the model in DistributedDataParallel (gloo on CPU, NCCL on"
        " CUDA), so --train --backward steps all-reduce gradients; layer paths stay the model's",
    )


def add_ops_options(p: argparse.ArgumentParser) -> None:
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


def list_of(parse: Any, what: str) -> Any:
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


def dtype_arg(text: str) -> str:
    if text not in DTYPES:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(DTYPES)}")
    return text


DTYPES = ("float32", "float16", "bfloat16", "float64")


def add_model_options(p: argparse.ArgumentParser, *, example_inputs: bool = True) -> None:
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


def add_compile_options(p: argparse.ArgumentParser) -> None:
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


class Parser(argparse.ArgumentParser):
    """argparse, with argument errors in layerprof's one-line form instead of the
    whole usage text (twenty lines for ``run``) above the one line that matters."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"layerprof: error: {message}\n  hint: see {self.prog} --help\n")


def root_parser(description: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The ``layerprof`` parser, and the parent of each command's parser (``common``)."""
    from layerprof.version import __version__

    parser = Parser(
        prog="layerprof",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"layerprof {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.add_argument("--max-input-size", type=_size_arg, metavar="SIZE", help=_MAX_INPUT_HELP)
    # --debug is accepted after the subcommand too; SUPPRESS keeps the main value.
    common = Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    common.add_argument(
        "--max-input-size",
        type=_size_arg,
        default=argparse.SUPPRESS,
        metavar="SIZE",
        help=_MAX_INPUT_HELP,
    )
    return parser, common
