"""Where the CLI's results go: output paths (checked before measuring, with the
demo model or torchrun rank in their names) and the files written after."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from layerprof.profile import Profile


FILE_OUTPUTS = ("json", "csv", "html", "trace", "stacks", "speedscope")


def check_outputs(args: argparse.Namespace) -> None:
    """Fail fast on an output path that cannot be written, before any measuring."""
    from layerprof.files import ensure_parent

    for name in FILE_OUTPUTS:
        if getattr(args, name, None):
            ensure_parent(getattr(args, name))
    if getattr(args, "tensorboard", None):
        ensure_parent(args.tensorboard, is_dir=True)


#: File options and the renderer each one writes (see layerprof.sinks).
RENDERED_OUTPUTS = (
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
    for option, fmt in RENDERED_OUTPUTS:
        path = getattr(args, option, None)
        if path:
            options = {"samples": getattr(args, "samples", False)} if fmt == "json" else {}
            written.append(sinks.write(profile, with_suffix(path, suffix), fmt, **options))
    if getattr(args, "tensorboard", None):
        from layerprof.render.chrome import write_tensorboard_dir

        # all ranks share the directory, as with tensorboard_trace_handler;
        # the rank goes into the worker name, where analyze finds it
        out_dir = with_suffix(args.tensorboard, suffix, rank=False)
        rank = rank_suffix()
        worker = f"{socket.gethostname()}_{rank}" if rank else None
        written.append(write_tensorboard_dir(out_dir, profile, worker=worker))
    for path in written:
        info(f"wrote {path}", args)


KNOWN_EXTENSIONS = (".speedscope.json", ".pt.trace.json", ".json.gz", ".json", ".csv", ".html")


def with_suffix(path: str, suffix: str | None, *, rank: bool = True) -> Path:
    """Insert ``suffix`` (and, under torchrun, the rank) before the file extension:
    ``report.html`` -> ``report.cnn.html``, ``t.json.gz`` -> ``t.rank-1.json.gz``."""
    p = Path(path)
    parts = [x for x in (suffix, rank_suffix() if rank else None) if x]
    if not parts:
        return p
    ext = next((e for e in KNOWN_EXTENSIONS if p.name.endswith(e)), p.suffix)
    stem = p.name[: len(p.name) - len(ext)] if ext else p.name
    return p.with_name(".".join([stem, *parts]) + ext)


def rank_suffix() -> str | None:
    from layerprof.distributed import rank_info

    info = rank_info()
    return info.suffix if info else None


def info(message: str, args: argparse.Namespace) -> None:
    if not getattr(args, "quiet", False):
        print(message, file=sys.stderr)
