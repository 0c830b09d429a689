"""Run ``layerprof run`` in fresh processes: repeats of one model, or two models in rounds.

Timings drift between processes by far more than inside one (10-40 % on this
project's loaded 2-core machine for an unchanged model), so a diff can only
separate a change from drift when each side carries several processes:

* :func:`repeat` runs the same ``run`` command line N times, one process each,
  and keeps their medians in the profile's ``repeats`` section;
* :func:`interleave` runs a base and a new command line in alternating rounds
  (base first in even rounds, new first in odd ones, so a steady drift and
  the cost of going first cancel), pairing the two processes of each round.

Each child writes its profile (with samples) to a temporary file through the
hidden ``run --child-out PATH`` option and prints nothing; its errors reach the
terminal as its own one-line message. This module never imports torch: the
children do.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from layerprof import codec
from layerprof.errors import LayerprofError, UsageError
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.repeats import Repeats, RunMedians, Side
from layerprof.stats import trimmed_mean

_CHILD_OPTION = "--child-out"
_Say = Callable[[str], None]


#: How a child starts: ``python -c`` with the current directory taken off ``sys.path``
#: before anything is imported, so a ``layerprof.py``, ``torch.py`` or ``numpy.py``
#: beside the user's files runs no code (``python -m`` would put the directory first;
#: ``-P`` needs Python 3.11). ``--arch`` still imports from the current directory, as
#: a plain ``run`` does: that is code the user named.
CHILD_BOOT = (
    "import sys\n"
    "if sys.path and sys.path[0] in ('', '.'):\n"
    "    del sys.path[0]\n"
    "from layerprof.cli import entry\n"
    "entry()\n"
)
#: A run command line longer than this is refused before any process starts (the
#: system's limit for one argument is 128 KiB on Linux; no real command line is near).
MAX_ARGV_CHARS = 65_536


class ChildFailed(LayerprofError):
    """A ``layerprof run`` child process failed, with what is known of why."""

    def __init__(self, what: str, code: int, *, wrote: bool) -> None:
        super().__init__(f"{what} {child_outcome(code, wrote=wrote)}")
        self.exit_code = code if code > 0 else 2


def child_outcome(code: int, *, wrote: bool) -> str:
    """What a child's exit code says: a signal by name, a clean exit that wrote nothing,
    or a failure whose one-line error the child printed itself."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} and wrote no profile"
    if code == 0:
        return "ended (exit 0) without writing its profile" if not wrote else "ended"
    return f"failed (exit {code}); its error is printed above"


class ChildTimedOut(LayerprofError):
    """A child ran past its time limit (and was killed)."""


def medians(profile: Profile, round_: int | None = None) -> RunMedians:
    """One process's medians: latency and every timed layer's self time per forward."""
    rows = [r for r in profile.rows() if r.calls]
    device = {r.path: round(r.device_self_ns) for r in rows if r.device_self_ns is not None}
    g = profile.generation
    return RunMedians(
        latency_ns=round(profile.latency_ns.median) if profile.latency_ns is not None else None,
        self_ns={r.path: round(r.self_ns) for r in rows},
        device_self_ns=device if device and len(device) == len(rows) else None,
        round=round_,
        rest_ratio=rest_ratios(profile),
        ttft_ns=round(g.ttft_ns.median) if g is not None and g.ttft_ns is not None else None,
        itl_ns=round(g.itl_ns.median) if g is not None and g.itl_ns is not None else None,
        phase_self_ns={p.name: {x.path: round(x.self_ns) for x in p.layers} for p in g.phases}
        if g is not None
        else None,
    )


def typical_ns(profile: Profile) -> float:
    """What picks the run a gathered profile shows: its median latency, or a generate's
    median whole-generate time (a generate profile has no latency), else its time to
    first token; 0 with none."""
    if profile.latency_ns is not None:
        return profile.latency_ns.median
    g = profile.generation
    for series in (g.generate_ns, g.ttft_ns) if g is not None else ():
        if series is not None:
            return series.median
    return 0.0


def rest_ratios(profile: Profile) -> dict[str, float] | None:
    """Each timed layer's host self time over the rest of the same forward.

    Per iteration ``i``: ``self_i / (forward_i - self_i)``, where ``forward_i`` is
    the sum of every layer's self time in that iteration (the whole instrumented
    forward); then the 20 %-trimmed mean over the iterations. A process that runs
    slower throughout scales both terms alike, so the ratio cancels what varies
    most between processes (on this project's machine one layer's median moved
    by 20-40 % between processes, its ratio by about 3 %). None without
    per-iteration samples of equal length; a layer with no rest is left out.
    """
    series = {p: s.self_ns.values for p, s in profile.samples.items() if s.calls}
    if not series or any(v is None or len(v) == 0 for v in series.values()):
        return None
    n = {len(v) for v in series.values()}
    if len(n) != 1:
        return None
    forward = [math.fsum(col) for col in zip(*(v.tolist() for v in series.values()), strict=True)]
    out = {}
    for path, values in series.items():
        ratios = [s / (f - s) for s, f in zip(values.tolist(), forward, strict=True) if f > s]
        if len(ratios) == len(forward):
            out[path] = trimmed_mean(ratios)
    return out


def gather(
    profiles: Sequence[Profile],
    *,
    rounds: Sequence[int] | None = None,
    session: str | None = None,
    side: Side | None = None,
) -> Profile:
    """One Profile of several processes of one model.

    The body (tree, samples, ops) is the run whose median latency (a generate's:
    its median whole generate, :func:`typical_ns`) is the median of the runs' (the
    lower one of the middle two), so the report shows a typical run; ``repeats``
    keeps every run's medians for the diff, a generate's phases included.
    """
    if not profiles:
        raise ValueError("gather needs at least one profile")
    keys = list(rounds) if rounds is not None else [None] * len(profiles)
    runs = tuple(medians(p, k) for p, k in zip(profiles, keys, strict=True))
    typical = [typical_ns(p) for p in profiles]
    order = sorted(range(len(profiles)), key=lambda i: typical[i])
    body = profiles[order[(len(order) - 1) // 2]]
    how = f"{len(profiles)} separate processes" + (" in interleaved rounds" if session else "")
    which = "latency" if body.latency_ns is not None or body.generation is None else "generate"
    note = Note(
        "repeated-processes",
        f"{how}: the tables show the run with the median {which}; the diff judges changes"
        " on the spread between the processes",
        {"processes": len(profiles), "interleaved": bool(session)},
    )
    return replace(
        body,
        repeats=Repeats(runs=runs, session=session, side=side),
        notes=(*body.notes, note),
    )


def repeat(argv: Sequence[str], n: int, *, say: _Say | None = None) -> Profile:
    """``layerprof <argv>`` (a ``run`` command line) in ``n`` processes, gathered."""
    with tempfile.TemporaryDirectory(prefix="layerprof-repeat-") as tmp:
        profiles = []
        for i in range(n):
            if say is not None:
                say(f"run {i + 1} of {n} (a separate process)")
            profiles.append(_child(argv, Path(tmp) / f"run{i}.json", f"run {i + 1} of {n}"))
    return gather(profiles)


def interleave(
    base_argv: Sequence[str],
    new_argv: Sequence[str],
    rounds: int,
    *,
    say: _Say | None = None,
    timeout: float | None = None,
) -> tuple[Profile, Profile]:
    """Base and new ``run`` command lines in ``rounds`` alternating rounds, paired by round;
    each process may take ``timeout`` seconds (None: no limit)."""
    session = uuid.uuid4().hex[:12]
    sides: dict[Side, list[Profile]] = {"base": [], "new": []}
    argvs: dict[Side, Sequence[str]] = {"base": base_argv, "new": new_argv}
    with tempfile.TemporaryDirectory(prefix="layerprof-rounds-") as tmp:
        for r in range(rounds):
            order: tuple[Side, Side] = ("base", "new") if r % 2 == 0 else ("new", "base")
            if say is not None:
                say(f"round {r + 1} of {rounds}: {order[0]}, then {order[1]}")
            for side in order:
                what = f"the {side} run of round {r + 1}"
                path = Path(tmp) / f"{side}{r}.json"
                sides[side].append(_child(argvs[side], path, what, timeout))
    keys = list(range(rounds))
    return (
        gather(sides["base"], rounds=keys, session=session, side="base"),
        gather(sides["new"], rounds=keys, session=session, side="new"),
    )


def check_argv(argv: Sequence[str], what: str) -> None:
    """Refuse a command line the system would refuse (``Argument list too long``)."""
    size = sum(len(w) + 1 for w in argv)
    if size > MAX_ARGV_CHARS:
        raise UsageError(
            f"{what} is {size} characters long; at most {MAX_ARGV_CHARS} can be passed on",
            hint="shorten it",
        )


def child_command(argv: Sequence[str], out: Path) -> list[str]:
    """The child's command line: this Python, the safe-path boot, then ``argv``."""
    return [sys.executable, "-c", CHILD_BOOT, *argv, _CHILD_OPTION, str(out)]


def _child(argv: Sequence[str], out: Path, what: str, timeout: float | None = None) -> Profile:
    """One ``layerprof run`` process writing its profile to ``out``."""
    # this layerprof, in the child too: the folder above the package (src/), never the
    # package's own folder, whose profile.py would stand in for the standard library's
    src = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    check_argv(argv, what)
    try:
        done = subprocess.run(
            child_command(argv, out), env=env, stdout=subprocess.DEVNULL, check=False,
            timeout=timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ChildTimedOut(
            f"{what} ran past its time limit of {timeout:g} s and was stopped",
            hint="raise it with --round-timeout SECONDS if the model is that slow",
        ) from None
    except OSError as exc:  # E2BIG past the check above, a missing interpreter, ...
        raise UsageError(f"{what} could not start: {exc.strerror or exc}") from None
    wrote = out.exists()
    if done.returncode != 0 or not wrote:
        raise ChildFailed(what, done.returncode, wrote=wrote)
    loaded = codec.load(out)
    if not isinstance(loaded, Profile):  # pragma: no cover - the child writes a profile
        raise ChildFailed(what, 2, wrote=True)
    return loaded
