"""Measuring a model for ``run`` and ``demo``: the command's options into RunOptions.

``--ops``, ``--compile`` and ``--loss`` each check that their companion options
came with them before anything is loaded or run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from layerprof.cli import outputs
from layerprof.errors import UsageError

if TYPE_CHECKING:
    from layerprof.capture.options import CompileOptions, OpOptions
    from layerprof.pivot.notes import Note
    from layerprof.pivot.profile import Profile


def measure(
    model: Any,
    input_specs: Sequence[str],
    args: argparse.Namespace,
    *,
    model_name: str,
    kind: str = "eager",
    notes: Sequence[Note] = (),
    program: Any = None,
) -> Profile:
    """Profile ``model`` on the inputs of ``input_specs`` (or a .pt2 program's own) as the
    measurement options of ``args`` say; the options are built as ``layerprof.profile()``
    builds them."""
    from layerprof.capture.options import run_options
    from layerprof.capture.platform.device import prepare_model, resolve_device
    from layerprof.capture.platform.distributed import ddp_wrapped
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
    options = run_options(
        warmup=args.warmup, iters=args.iters, device=device, threads=args.threads,
        eval=not args.train, inference_mode=not args.no_inference_mode, grad=args.grad,
        correct_overhead=not args.no_correct, progress=sys.stderr.isatty() and not args.quiet,
        model_name=model_name, input_descriptions=tuple(inputs.descriptions),
        dtype=args.dtype, ops=ops, backward=args.backward, loss=loss, kind=kind,
        compile=compile_options(args), meta_extra={"kind": kind}, peak=args.peak,
    )  # fmt: skip
    generate = getattr(args, "generate", None)
    if generate is not None:
        from layerprof.capture.generate import profile_generate
        from layerprof.capture.options import check_generate

        check_generate(options, cli=True)  # --train, --grad, --ops...: refused, not ignored
        if getattr(args, "ddp", False):
            raise UsageError("--generate does not go with --ddp yet")
        profile = profile_generate(
            model, tuple(inputs.args), dict(inputs.kwargs), generate,
            warmup=options.warmup, iters=options.iters, threads=options.threads,
            inference_mode=options.inference_mode, correct=options.correct_overhead,
            peak=options.peak, model_name=model_name,
        )  # fmt: skip
        return profile.with_notes(*notes) if notes else profile
    with ddp_wrapped(model, device, enabled=getattr(args, "ddp", False)) as model:
        profile = run_model(
            model, tuple(inputs.args), dict(inputs.kwargs), options, program=program
        )
    return profile.with_notes(*notes) if notes else profile


def compile_options(args: argparse.Namespace) -> CompileOptions | None:
    """--compile and its options; the options without --compile are a usage error."""
    from layerprof.capture.options import CompileOptions

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
    from layerprof.capture.options import OpOptions

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
