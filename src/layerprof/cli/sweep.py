"""``layerprof sweep``: the same model over batch sizes, dtypes and thread counts.

Loads the model as ``run`` does, runs the grid (``layerprof.capture.sweep``),
writes the files asked for (each whole or not at all), then prints the table.
Each point's label goes to standard error as it starts, unless ``--quiet``.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from layerprof.cli import outputs
from layerprof.cli.emission import console
from layerprof.cli.loading import load
from layerprof.cli.options import (
    COUNT,
    DTYPES,
    NON_NEGATIVE,
    add_model_options,
    dtype_arg,
    list_of,
    seed_arg,
    threads_arg,
)
from layerprof.errors import ModelRunError, UsageError

NAME = "sweep"

#: ``layerprof.pivot.sections.sweep``'s DEFAULT_ITERS and DEFAULT_WARMUP (tests/cli/test_startup.py
#: keeps them equal): importing that module here would load every section at --help
SWEEP_ITERS, SWEEP_WARMUP = 20, 3


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    DEFAULT_ITERS, DEFAULT_WARMUP = SWEEP_ITERS, SWEEP_WARMUP
    parser = sub.add_parser(
        NAME,
        parents=[common],
        help="the same model over batch sizes, dtypes and thread counts",
        description="Run the same model at every combination of --batch, --dtype and --threads"
        " (any subset): latency percentiles, throughput, FLOP/s, peak memory and each layer's"
        " share of the forward per point. The batch replaces dimension --batch-dim (default 0)"
        " of every --input shape spec; inputs with fewer dimensions stay as they are. A point"
        " that runs out of memory ends its row: larger batches of the same dtype and threads"
        " are skipped, and the report says where. With --generate N each point times"
        " model.generate() of N new tokens (a Hugging Face causal LM; --input is the prompt,"
        " a batch x tokens tensor of ids): time to first token, inter-token latency and"
        " prefill and decode tokens/s per point, over --prompt lengths and --batch sizes.",
    )
    add_model_options(parser, example_inputs=False)
    grid = parser.add_argument_group("grid")
    grid.add_argument(
        "--batch", type=list_of(COUNT, "batch sizes"), default=(), metavar="N[,N...]",
        help="batch sizes, e.g. 1,8,32,128 (default: the inputs as given)",
    )  # fmt: skip
    grid.add_argument(
        "--dtype", type=list_of(dtype_arg, "dtypes"), default=(), metavar="DTYPE[,DTYPE...]",
        help=f"model and float input dtypes, of {', '.join(DTYPES)} (default: the model's own)",
    )  # fmt: skip
    grid.add_argument(
        "--threads", type=list_of(threads_arg, "thread counts"), default=(), metavar="N[,N...]",
        help="torch.set_num_threads per point, e.g. 1,2 (default: torch's own)",
    )  # fmt: skip
    grid.add_argument(
        "--generate", type=COUNT, default=None, metavar="N",
        help="time model.generate() of N new tokens per point (greedy), not one forward",
    )  # fmt: skip
    grid.add_argument(
        "--prompt", type=list_of(COUNT, "prompt lengths"), default=(), metavar="L[,L...]",
        help="with --generate: prompt lengths, each replacing the last dimension of every"
        " --input of two or more dimensions (batch x tokens)",
    )  # fmt: skip
    grid.add_argument(
        "--batch-dim", type=NON_NEGATIVE, default=0, metavar="D",
        help="the dimension of each --input shape the batch replaces (default 0; 1 for"
        " sequence-first inputs)",
    )  # fmt: skip
    m = parser.add_argument_group("measurement")
    m.add_argument("--warmup", type=NON_NEGATIVE, default=DEFAULT_WARMUP,
                   help=f"untimed forwards per point after its cold call (default {DEFAULT_WARMUP})")  # fmt: skip
    m.add_argument("--iters", type=COUNT, default=DEFAULT_ITERS,
                   help=f"timed forwards per pass and point (default {DEFAULT_ITERS})")  # fmt: skip
    m.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    m.add_argument(
        "--seed", type=seed_arg, default=0, help="seed for random inputs (default 0; 64 bits)"
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
    out = parser.add_argument_group("output", outputs.STDOUT_HELP)
    outputs.add_output(out, "--json", "write the sweep (schema layerprof.sweep/1)")
    outputs.add_output(out, "--html", "write a self-contained HTML report with the charts")
    out.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")


def run(args: argparse.Namespace) -> int:
    """Load the model as ``run`` does, run the grid, write the files, print the table."""
    from layerprof import sinks
    from layerprof.capture.platform.device import resolve_device
    from layerprof.capture.sweep import SweepOptions, run_sweep
    from layerprof.cli import inputfiles
    from layerprof.load.modulegraph import check_acyclic
    from layerprof.pivot.sections.sweep import OK

    if not args.input:
        raise UsageError("sweep needs --input", hint="e.g. --input 8x3x224x224 --batch 1,8,32")
    outputs.check_outputs(args, inputs=inputfiles.model_inputs(args))
    loaded = load(args)
    device = resolve_device(args.device)
    model = loaded.module
    check_acyclic(model)  # before .to(): it recurses forever on a looping tree
    options = SweepOptions(
        batches=tuple(args.batch), dtypes=tuple(args.dtype), threads=tuple(args.threads),
        batch_dim=args.batch_dim, device=device, warmup=args.warmup, iters=args.iters,
        seed=args.seed, eval=not args.train, inference_mode=not args.no_inference_mode,
        layers=not args.no_layers, memory=not args.no_memory, model_name=loaded.name,
        kind=loaded.kind, program=loaded.program, generate=args.generate,
        prompts=tuple(args.prompt),
    )  # fmt: skip
    points = _count(options)
    done = [0]

    def progress(label: str) -> None:
        done[0] += 1
        outputs.info(f"sweep {done[0]}/{points}: {label}", args)

    sweep = run_sweep(model, args.input, options, progress=progress)
    written = [
        sinks.write(sweep, path, fmt)
        for fmt in ("json", "html")
        if (path := outputs.target(args, fmt))
    ]
    outputs.report_written(written, args)
    if not args.quiet:
        sinks.show(sweep, console=console(args))
    if not any(p.status == OK for p in sweep.points):
        first = next((p for p in sweep.points if p.reason), None)
        # the report above already lists every point's reason: the error line only repeats
        # one when nothing was printed (-q)
        why = f": {first.label}: {first.reason}" if first is not None and args.quiet else ""
        raise ModelRunError(
            f"no point of the sweep ran{why}" + ("" if args.quiet else " (the reasons are above)")
        )
    return 0


def _count(options: Any) -> int:
    sizes = (options.batches, options.dtypes, options.threads, options.prompts)
    return math.prod(max(len(s), 1) for s in sizes)
