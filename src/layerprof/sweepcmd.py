"""``layerprof sweep``: the command's body (the parser is in ``layerprof.cli``).

Loads the model as ``run`` does, runs the grid (``layerprof.capture.sweep``),
writes the files asked for (each whole or not at all), then prints the table.
Each point's label goes to standard error as it starts, unless ``--quiet``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from layerprof import outputs
from layerprof.errors import ModelRunError, UsageError
from layerprof.sections.sweep import OK


def sweep_command(args: argparse.Namespace, *, load: Callable[[], Any]) -> int:
    from layerprof import sinks
    from layerprof.capture.device import resolve_device
    from layerprof.capture.sweep import SweepOptions, run_sweep
    from layerprof.load.modulegraph import check_acyclic

    if not args.input:
        raise UsageError("sweep needs --input", hint="e.g. --input 8x3x224x224 --batch 1,8,32")
    outputs.check_outputs(args)
    loaded = load()
    device = resolve_device(args.device)
    model = loaded.module
    check_acyclic(model)  # before .to(): it recurses forever on a looping tree
    options = SweepOptions(
        batches=tuple(args.batch), dtypes=tuple(args.dtype), threads=tuple(args.threads),
        batch_dim=args.batch_dim, device=device, warmup=args.warmup, iters=args.iters,
        seed=args.seed, eval=not args.train, inference_mode=not args.no_inference_mode,
        layers=not args.no_layers, memory=not args.no_memory, model_name=loaded.name,
        kind=loaded.kind, program=loaded.program,
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
        from layerprof.render.terminal import make_console

        sinks.show(sweep, console=make_console(stderr=outputs.to_stdout(args)))
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
    return max(len(options.batches), 1) * max(len(options.dtypes), 1) * max(len(options.threads), 1)
