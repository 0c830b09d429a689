"""Where the CLI's results go: output paths (checked before measuring, with the
demo model or torchrun rank in their names) and the files written after."""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof.errors import UsageError

if TYPE_CHECKING:
    from layerprof.profile import Profile
    from layerprof.runner import Measurement


FILE_OUTPUTS = ("json", "csv", "html", "trace", "stacks", "speedscope")


def check_outputs(args: argparse.Namespace) -> None:
    """Fail fast on an output path that cannot be written, before any measuring."""
    from layerprof.files import ensure_parent

    for name in FILE_OUTPUTS:
        if getattr(args, name, None):
            ensure_parent(getattr(args, name))
    if getattr(args, "tensorboard", None):
        ensure_parent(args.tensorboard, is_dir=True)


def write_exports(measured: Measurement, args: argparse.Namespace, *, suffix: str | None) -> None:
    written: list[Path] = []
    capture = measured.capture
    if getattr(args, "trace", None) or getattr(args, "tensorboard", None):
        from layerprof.render.chrome import write_chrome_trace, write_tensorboard_dir

        if capture is None:  # pragma: no cover - _op_options refuses this earlier
            raise UsageError("--trace and --tensorboard need --ops")
        if args.trace:
            written.append(
                write_chrome_trace(with_suffix(args.trace, suffix), capture, measured.profile)
            )
        if args.tensorboard:
            # all ranks share the directory, as with tensorboard_trace_handler;
            # the rank goes into the worker name, where analyze finds it
            out_dir = with_suffix(args.tensorboard, suffix, rank=False)
            rank = rank_suffix()
            worker = f"{socket.gethostname()}_{rank}" if rank else None
            written.append(write_tensorboard_dir(out_dir, capture, measured.profile, worker=worker))
    if getattr(args, "stacks", None):
        from layerprof.render.stacks import write_folded

        written.append(write_folded(with_suffix(args.stacks, suffix), measured.profile))
    if getattr(args, "speedscope", None):
        from layerprof.render.stacks import write_speedscope

        written.append(write_speedscope(with_suffix(args.speedscope, suffix), measured.profile))
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


def write_outputs(
    profile: Profile,
    args: argparse.Namespace,
    *,
    suffix: str | None = None,
    findings: Sequence[dict[str, Any]] = (),
) -> None:
    written: list[Path] = []
    if getattr(args, "json", None):
        written.append(
            profile.save(with_suffix(args.json, suffix), samples=getattr(args, "samples", False))
        )
    if getattr(args, "csv", None):
        from layerprof.files import write_atomic
        from layerprof.render.table import profile_to_csv

        written.append(write_atomic(with_suffix(args.csv, suffix), profile_to_csv(profile)))
    if getattr(args, "html", None):
        from layerprof.render.html import write_html

        path = with_suffix(args.html, suffix)
        written.append(write_html(path, profile=profile, findings=findings))
    for path in written:
        info(f"wrote {path}", args)


def info(message: str, args: argparse.Namespace) -> None:
    if not getattr(args, "quiet", False):
        print(message, file=sys.stderr)
