"""Where the CLI's results go: output options (declared apart from inputs, checked
before measuring, with the demo model or torchrun rank in their names) and the
files written after.

Output options are declared with :func:`add_output`, which stores them under
``args.out_<name>``: nothing but an output option lives in that namespace, so an
input argument (``analyze TRACE``) can never be taken for an output (``--trace``).
Every output takes ``-`` for standard output; at most one may, and then the
console report goes to standard error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof.errors import UsageError
from layerprof.files import STDOUT, is_stdout

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile

PREFIX = "out_"
#: Outputs that name a directory, not a file.
_DIRECTORY_OUTPUTS = frozenset({"tensorboard"})
STDOUT_HELP = (
    "FILE may be - for standard output (one output at most); the console report then goes"
    " to standard error"
)


def add_output(
    group: argparse._ArgumentGroup | argparse.ArgumentParser, flag: str, help: str, **kw: Any
) -> None:
    """Declare an output option ``--name`` (stored as ``args.out_name``)."""
    name = flag.removeprefix("--").replace("-", "_")
    metavar = "DIR" if name in _DIRECTORY_OUTPUTS else "FILE"
    group.add_argument(flag, dest=PREFIX + name, metavar=metavar, help=help, **kw)


def target(args: argparse.Namespace, name: str) -> str | None:
    """The value of output option ``name`` (``"json"``), or None when not given."""
    value = getattr(args, PREFIX + name, None)
    return str(value) if value else None


def given(args: argparse.Namespace) -> dict[str, str]:
    """Every output option given: name -> path (``"-"`` for standard output)."""
    return {
        key.removeprefix(PREFIX): str(value)
        for key, value in vars(args).items()
        if key.startswith(PREFIX) and value
    }


def to_stdout(args: argparse.Namespace) -> bool:
    """True when an output goes to standard output (the report must then not)."""
    return any(is_stdout(path) for path in given(args).values())


def check_outputs(
    args: argparse.Namespace,
    *,
    suffixes: Sequence[str | None] = (None,),
    stdout_taken: str | None = None,
    inputs: Sequence[str | None] = (),
) -> None:
    """Fail fast on output paths that cannot be written, before any measuring.

    ``suffixes`` go into the file names, one copy of each output per suffix
    (the demo's model names); ``stdout_taken`` names what else already prints
    data on standard output (``diff --format json``); ``inputs`` are the files
    the command reads, which no output may be.
    """
    from layerprof.files import check_writable, ensure_parent

    outs = given(args)
    _check_stdout(outs, copies=len(suffixes), stdout_taken=stdout_taken)
    _check_distinct(outs, suffixes, [i for i in inputs if i])
    for name, path in outs.items():
        if is_stdout(path):
            continue
        if name in _DIRECTORY_OUTPUTS:
            ensure_parent(path, is_dir=True)
            continue
        for suffix in suffixes:
            check_writable(with_suffix(path, suffix))


def _check_distinct(
    outs: dict[str, str], suffixes: Sequence[str | None], inputs: Sequence[str]
) -> None:
    """No output is one of the command's input files (``diff b.json n.json --json b.json``
    would replace the baseline), also through a link, nor the file of another output
    (``--json x --html x``: the second would replace the first)."""
    seen: dict[tuple[object, ...], str] = {}
    for name, path in outs.items():
        if is_stdout(path) or name in _DIRECTORY_OUTPUTS:
            continue
        flag = f"--{name.replace('_', '-')}"
        for suffix in suffixes:
            out = with_suffix(path, suffix)
            for source in inputs:
                if _same_file(out, Path(source)):
                    raise UsageError(
                        f"{flag} {out} is the input {source}: writing it would replace what is read",
                        hint="write the output to another file",
                    )
            key = _identity(out)
            if key in seen:
                raise UsageError(
                    f"{seen[key]} and {flag} would both write {out}",
                    hint="give each output a file of its own",
                )
            seen[key] = flag


def _identity(path: Path) -> tuple[object, ...]:
    """The file a path names: its inode where it exists (links and hard links included),
    else its resolved path."""
    import os

    try:
        st = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return ("inode", st.st_dev, st.st_ino)


def _same_file(a: Path, b: Path) -> bool:
    import os

    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare where they lead
        return os.path.realpath(a) == os.path.realpath(b)


def _check_stdout(outs: dict[str, str], *, copies: int, stdout_taken: str | None) -> None:
    flags = [f"--{name.replace('_', '-')}" for name, path in outs.items() if is_stdout(path)]
    if not flags:
        return
    for flag in flags:
        if flag.removeprefix("--") in _DIRECTORY_OUTPUTS:
            raise UsageError(f"{flag} takes a directory; - (standard output) cannot be one")
    taken = [*flags, *([stdout_taken] if stdout_taken else [])]
    if len(taken) > 1:
        raise UsageError(
            f"{' and '.join(taken)} would all write to standard output; at most one may",
            hint="give the others a file name",
        )
    if copies > 1:
        raise UsageError(
            f"{flags[0]} -: {copies} models would write one after another to standard output",
            hint="pick one with --model, or give a file name (the model name goes into it)",
        )
    if _rank_suffix() is not None:
        raise UsageError(
            f"{flags[0]} -: every torchrun rank would write to the same standard output",
            hint="give a file name; each rank writes its own (p.rank-1.json)",
        )


#: File options and the renderer each one writes (see layerprof.sinks).
_RENDERED_OUTPUTS = (
    ("json", "json"),
    ("csv", "csv"),
    ("html", "html"),
    ("trace", "trace"),
    ("stacks", "folded"),
    ("speedscope", "speedscope"),
)


def write_profile_outputs(
    profile: Profile, args: argparse.Namespace, *, suffix: str | None = None
) -> None:
    """Every file the options ask for, each whole or not at all (torchrun: the rank's name)."""
    from layerprof import sinks

    written: list[Path] = []
    for option, fmt in _RENDERED_OUTPUTS:
        path = target(args, option)
        if path:
            options = {"samples": getattr(args, "samples", False)} if fmt == "json" else {}
            written.append(sinks.write(profile, with_suffix(path, suffix), fmt, **options))
    tensorboard = target(args, "tensorboard")
    if tensorboard:
        import socket  # here: every command's start-up imports this module

        from layerprof.render.chrome import write_tensorboard_dir

        # all ranks share the directory, as with tensorboard_trace_handler;
        # the rank goes into the worker name, where analyze finds it
        out_dir = with_suffix(tensorboard, suffix, rank=False)
        rank = _rank_suffix()
        worker = f"{socket.gethostname()}_{rank}" if rank else None
        written.append(write_tensorboard_dir(out_dir, profile, worker=worker))
    report_written(written, args)


_KNOWN_EXTENSIONS = (".speedscope.json", ".pt.trace.json", ".json.gz", ".json", ".csv", ".html")


def with_suffix(path: str, suffix: str | None, *, rank: bool = True) -> Path:
    """Insert ``suffix`` (and, under torchrun, the rank) before the file extension:
    ``report.html`` -> ``report.cnn.html``, ``t.json.gz`` -> ``t.rank-1.json.gz``.
    Standard output (``-``) stays ``-``."""
    p = Path(path)
    parts = [x for x in (suffix, _rank_suffix() if rank else None) if x]
    if not parts or is_stdout(path):
        return p
    ext = next((e for e in _KNOWN_EXTENSIONS if p.name.endswith(e)), p.suffix)
    stem = p.name[: len(p.name) - len(ext)] if ext else p.name
    return p.with_name(".".join([stem, *parts]) + ext)


def _rank_suffix() -> str | None:
    from layerprof.capture.platform.distributed import rank_info

    info = rank_info()
    return info.suffix if info else None


def report_written(paths: Sequence[Path], args: argparse.Namespace) -> None:
    """``wrote PATH`` on standard error for each file (not for standard output)."""
    for path in paths:
        if str(path) != STDOUT:
            info(f"wrote {path}", args)


def info(message: str, args: argparse.Namespace) -> None:
    if not getattr(args, "quiet", False):
        from layerprof.render.terminal import escape_controls  # a path may hold a newline

        print(escape_controls(message), file=sys.stderr)
