"""``layerprof run``: profile one model file or ``--arch`` callable, layer by layer.

With ``--repeat N`` the profile comes from N fresh processes (``layerprof.cli.processes``),
each a ``run --child-out`` of this same command; ``diff --run`` starts such children too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from layerprof.cli import history, outputs
from layerprof.cli.emission import emit, say
from layerprof.cli.loading import load
from layerprof.cli.measure import compile_options, measure
from layerprof.cli.options import (
    COUNT,
    Parser,
    add_compile_options,
    add_measure_options,
    add_model_options,
    add_ops_options,
    add_output_options,
    root_parser,
)
from layerprof.errors import UsageError

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile

NAME = "run"


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        NAME,
        parents=[common], help="profile a model file or an --arch callable",
        description="Profile one forward pass of a model, layer by layer. MODEL is a state_dict/checkpoint "
        "file (needs --arch), a TorchScript archive, a torch.export .pt2 file, or a pickled module "
        "(needs --trust-pickle). Without MODEL, --arch builds the model with random weights.",
    )  # fmt: skip
    add_model_options(parser)
    add_measure_options(parser, warmup=5, iters=50)
    parser.add_argument(
        "--repeat", type=COUNT, default=1, metavar="N",
        help="profile in N separate processes and keep each one's medians in the profile, so"
        " that diff judges changes on the run-to-run spread (default 1; see docs/diff.md)",
    )  # fmt: skip
    parser.add_argument(
        "--generate", type=COUNT, default=None, metavar="N",
        help="profile model.generate() of exactly N greedy new tokens (a Hugging Face causal"
        " LM; the prompt is the first --input): time to first token, inter-token latency,"
        " prefill and decode per layer, the KV cache; --warmup/--iters count generates;"
        " --ops, --backward, --compile, --train and --grad are refused, and a prompt plus N"
        " beyond the model's max_position_embeddings",
    )  # fmt: skip
    # --repeat's and diff --run's child processes write their profile there
    parser.add_argument("--child-out", metavar="PATH", help=argparse.SUPPRESS)
    add_ops_options(parser)
    add_compile_options(parser)
    add_output_options(parser)
    parser.add_argument(
        "--history", metavar="DB",
        help="also add the profile to this history file (needs --commit; see layerprof history)",
    )  # fmt: skip
    history.add_run_options(parser, required=False)


class _WordsParser(Parser):
    """``run``'s parser for words that another command passes on (``diff --run``): its
    errors, and ``-h``, are raised as one-line usage errors instead of exiting."""

    context = "run"

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.context}: {message}")

    def print_help(self, file: Any = None) -> None:
        raise UsageError(f"{self.context}: -h/--help would print run's help instead of running")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise UsageError(f"{self.context}: {(message or 'it would exit').strip()}")


def parse_words(
    words: Sequence[str], context: str
) -> tuple[argparse.Namespace, argparse.Namespace, dict[str, str]]:
    """``words`` (a run command line without ``run``) parsed as ``layerprof run`` parses
    them, run's defaults, and each destination's first option string; errors name
    ``context``."""
    root, common = root_parser("")
    sub = root.add_subparsers(dest="command", parser_class=_WordsParser)
    add_parser(sub, common)
    parser = sub.choices[NAME]
    parser.context = context
    flags = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    return parser.parse_args(list(words)), parser.parse_args([]), flags


def run(args: argparse.Namespace) -> int:
    """Profile a model file or an --arch callable, in this process or in --repeat N."""
    from layerprof.cli import inputfiles

    if args.child_out:
        return _run_child(args)
    outputs.check_outputs(args, inputs=inputfiles.model_inputs(args))
    compile_options(args)  # a bad combination fails before a long load
    history.check_run_options(args)
    if args.repeat > 1:
        return _run_repeated(args)
    loaded = load(args)
    profile = measure(
        loaded.module,
        args.input,
        args,
        model_name=loaded.name,
        kind=loaded.kind,
        notes=loaded.notes,
        program=loaded.program,
    )
    emit(profile, args)
    _record_history(profile, args)
    return 0


def _record_history(profile: Profile, args: argparse.Namespace) -> None:
    if args.history:
        history.record(profile, args.history, commit=args.commit, branch=args.branch)


def _run_child(args: argparse.Namespace) -> int:
    """One process of --repeat or diff --run: the profile (with samples) to --child-out."""
    args.quiet = True
    loaded = load(args)
    profile = measure(
        loaded.module, args.input, args, model_name=loaded.name, kind=loaded.kind,
        notes=loaded.notes, program=loaded.program,
    )  # fmt: skip
    profile.save(args.child_out, samples=True)
    return 0


def _run_repeated(args: argparse.Namespace) -> int:
    from layerprof.cli import processes

    for flag in ("trace", "tensorboard"):
        if outputs.target(args, flag):
            raise UsageError(f"--{flag} writes one process's trace; it does not go with --repeat")
    tell = None if args.quiet else (lambda line: say(f"layerprof: {line}"))
    argv = getattr(args, "argv", None) or sys.argv[1:]  # main() keeps the command line
    profile = processes.repeat(argv, args.repeat, say=tell)
    emit(profile, args)
    _record_history(profile, args)
    return 0
