"""``layerprof demo``: profile the built-in example models on CPU."""

from __future__ import annotations

import argparse
from typing import Any

from layerprof.cli import outputs
from layerprof.cli.emission import emit
from layerprof.cli.measure import measure
from layerprof.cli.options import (
    add_compile_options,
    add_measure_options,
    add_ops_options,
    add_output_options,
)

NAME = "demo"


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        NAME,
        parents=[common],
        help="profile the built-in example models on CPU",
        description="Profile the built-in example models (a small CNN and a small transformer encoder) on CPU. With several models, output files get the model name inserted (report.html -> report.cnn.html).",
    )
    parser.add_argument(
        "--model",
        choices=("all", "cnn", "transformer"),
        default="all",
        help="which built-in model (default: both)",
    )
    add_measure_options(parser, warmup=3, iters=20)
    add_ops_options(parser)
    add_compile_options(parser)
    add_output_options(parser)


def run(args: argparse.Namespace) -> int:
    """Profile each chosen demo model; several get their name in the output files."""
    from layerprof.load.demo import DEMOS, build

    names = list(DEMOS) if args.model == "all" else [args.model]
    outputs.check_outputs(args, suffixes=names if len(names) > 1 else [None])
    for name in names:
        model = build(name)
        label = f"demo {name} ({type(model).__name__})"
        profile = measure(model, DEMOS[name][1], args, model_name=label)
        emit(profile, args, suffix=name if len(names) > 1 else None)
    return 0
