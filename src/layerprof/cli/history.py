"""``layerprof history``: per-layer history across commits, in one SQLite file.

``add`` saved profiles (or ``run --history DB --commit SHA``), ``show`` the latest
change points and trends, ``report --html`` a page of trend charts, ``check`` a
CI gate on the newest runs, ``export`` CSV or JSON. No torch: profiles are read
through the codec (docs/history.md).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof.cli.emission import say
from layerprof.cli.options import COUNT, parse_percent
from layerprof.errors import UsageError

if TYPE_CHECKING:
    from layerprof.history.changes import HistoryView
    from layerprof.history.store import HistoryStore
    from layerprof.pivot.profile import Profile

NAME = "history"
DEFAULT_DB = ".layerprof/history.db"  # history.store.DEFAULT_PATH (not imported at start-up)
WINDOW = 100


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        NAME,
        parents=[common],
        help="keep profiles per commit; find which layer changed, since which commit",
        description="A history of profiles, one SQLite file (--db). Runs are compared only"
        " within one environment (model, machine, device, torch, dtype, inputs). Change points"
        " per layer are found against the history's own run-to-run noise (docs/history.md).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument(
        "--db", default=DEFAULT_DB, metavar="PATH", help=f"the history file (default {DEFAULT_DB})"
    )
    add = actions.add_parser(
        "add", parents=[common, db], help="add saved profiles (run --json, run --repeat N --json)"
    )
    add.add_argument("profiles", nargs="+", metavar="PROFILE", help="saved profiles (JSON)")
    add_run_options(add, required=True)
    add.add_argument(
        "--when",
        metavar="T",
        help="when the runs were made: ISO 8601 or seconds since the epoch (default: the"
        " profile's own time, else now); runs are ordered by it",
    )
    view = argparse.ArgumentParser(add_help=False)
    _add_view_options(view)
    show = actions.add_parser(
        "show", parents=[common, db, view], help="the latest change points and a trend per layer"
    )
    show.add_argument("--layer", metavar="PATH", help="one layer's (or figure's) runs in full")
    show.add_argument("--json", action="store_true", help="print JSON instead of tables")
    report = actions.add_parser(
        "report", parents=[common, db, view], help="an HTML page of trend charts"
    )
    report.add_argument("--html", required=True, metavar="OUT", help="the page to write")
    check = actions.add_parser(
        "check", parents=[common, db, view], help="exit 1 on a regression in the newest runs"
    )
    check.add_argument(
        "--fail-above",
        default="5%",
        metavar="PCT",
        help="fail for a slowdown beyond the noise and larger than PCT (default 5%%)",
    )
    check.add_argument(
        "--recent",
        type=COUNT,
        default=10,
        metavar="N",
        help="look for changes that started in the newest N runs (default 10)",
    )
    export = actions.add_parser("export", parents=[common, db], help="every run as CSV or JSON")
    export.add_argument("--csv", metavar="OUT", help="one row per run and series")
    export.add_argument("--json", metavar="OUT", help="one object per run")


def add_run_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """``--commit`` and ``--branch`` (``history add``; ``run --history``)."""
    parser.add_argument(
        "--commit", required=required, metavar="SHA", help="the commit the profile measured"
    )
    parser.add_argument("--branch", metavar="B", help="its branch")


def _add_view_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env", metavar="KEY", help="the environment (default: that of the newest run)"
    )
    parser.add_argument(
        "--window",
        type=COUNT,
        default=WINDOW,
        metavar="N",
        help=f"judge the newest N runs of the environment (default {WINDOW})",
    )
    parser.add_argument(
        "--clock", choices=("host", "device"), default="host", help="which self times to test"
    )
    parser.add_argument(
        "--min-share",
        default="1%",
        metavar="PCT",
        help="test layers with at least PCT of the self time (default 1%%)",
    )
    parser.add_argument(
        "--fdr",
        type=float,
        default=0.01,
        metavar="Q",
        help="false-discovery rate across the series tested (default 0.01)",
    )


def run(args: argparse.Namespace) -> int:
    action: str = args.action
    if action == "add":
        return _add(args)
    if action == "export":
        return _export(args)
    with _open(args.db) as store:
        view = _view(store, args)
    if action == "show":
        return _show(view, args)
    if action == "report":
        return _report(view, args)
    return _check(view, args)


# ---------------------------------------------------------------- add


def _add(args: argparse.Namespace) -> int:
    from layerprof.history.ingest import entries, when_of

    _check_commit(args.commit)
    when = _when(args.when) if args.when else None
    profiles = [(path, _profile(path, args.max_input_size)) for path in args.profiles]
    runs = [
        entry
        for path, profile in profiles
        for entry in entries(
            profile,
            commit=args.commit,
            branch=args.branch,
            source=Path(path).name,
            when_ns=when or when_of(profile) or time.time_ns(),
        )
    ]
    with _open(args.db, create=True) as store:
        store.add(runs)
    envs = sorted({r.env.key for r in runs})
    say(
        f"layerprof: {args.db}: added {len(runs)} run{'s' if len(runs) != 1 else ''} of commit"
        f" {args.commit[:10]} (environment {', '.join(envs)})"
    )
    return 0


def record(profile: Profile, db: str, *, commit: str, branch: str | None) -> None:
    """Add a profile just measured (``run --history DB --commit SHA``) to ``db``."""
    from layerprof.history.ingest import entries

    runs = entries(profile, commit=commit, branch=branch, source="run", when_ns=time.time_ns())
    with _open(db, create=True) as store:
        store.add(runs)
    say(f"layerprof: {db}: added {len(runs)} run{'s' if len(runs) != 1 else ''} of {commit[:10]}")


def check_run_options(args: argparse.Namespace) -> None:
    """``run``'s --history and --commit go together, and the history opens (created if
    new): a typo or a foreign file fails in a second, not after the measurement."""
    db, commit = getattr(args, "history", None), getattr(args, "commit", None)
    if db and not commit:
        raise UsageError("--history needs --commit SHA: the commit the run measures")
    if commit is not None and not db:
        raise UsageError("--commit names the commit of a run added with --history DB")
    if db:
        _check_commit(commit)
        _open(db, create=True).close()


def _check_commit(commit: str | None) -> None:
    if commit is None or not commit.strip():
        raise UsageError("--commit: empty; give the commit the profile measured")


def _profile(path: str, max_input_size: int | None) -> Profile:
    from layerprof import codec
    from layerprof.errors import ProfileFormatError
    from layerprof.pivot.profile import Profile, Run

    loaded = codec.load(path, max_input_size=max_input_size)
    if isinstance(loaded, Run) and len(loaded.ranks) == 1:  # analyze --json of one rank
        return loaded.rank()
    if isinstance(loaded, Run):
        raise ProfileFormatError(
            f"{path}: a trace analysis of {len(loaded.ranks)} ranks; a history run is one",
            hint="save one rank's analysis: layerprof analyze RANK_TRACE --json P.json",
        )
    if not isinstance(loaded, Profile):
        raise ProfileFormatError(
            f"{path}: holds a {type(loaded).__name__}, not one profile",
            hint="add saved profiles: layerprof run ... --json P.json (one per rank)",
        )
    return loaded


def _when(text: str) -> int:
    from layerprof.history.ingest import parse_when

    when = parse_when(text)
    if when is None:
        raise UsageError(
            f"--when {text!r}: not a time",
            hint="ISO 8601 (2026-11-28T12:00:00Z) or seconds since the epoch",
        )
    return when


def _open(db: str, *, create: bool = False) -> HistoryStore:
    from layerprof.history.store import HistoryStore

    return HistoryStore(db, create=create)


# ---------------------------------------------------------------- show, report, check


def _view(store: HistoryStore, args: argparse.Namespace) -> HistoryView:
    from layerprof.history.changepoints import Detection
    from layerprof.history.changes import analyze
    from layerprof.history.records import HistoryError

    if not 0 < args.fdr < 1:
        raise UsageError(f"--fdr {args.fdr:g}: a rate strictly between 0 and 1")
    envs = store.environments()
    if not envs:
        raise HistoryError(f"{args.db}: the history has no runs yet")
    chosen = next((e for e in envs if e.env.key == args.env), None) if args.env else envs[0]
    if chosen is None:
        keys = ", ".join(e.env.key for e in envs[:8])
        raise UsageError(f"--env {args.env}: no such environment in {args.db} (it has {keys})")
    if len(envs) > 1 and not getattr(args, "json", False):
        others = "; ".join(f"{e.env.key} ({e.runs} runs: {e.env.describe()})" for e in envs[:4])
        say(f"layerprof: {len(envs)} environments in {args.db}, judged apart (--env KEY): {others}")
    window = store.window(chosen.env, args.window)
    if args.clock == "device" and window.device_self_ns is None:
        raise UsageError(
            f"--clock device: no run of environment {chosen.env.key} recorded device times",
            hint="device times come from CUDA runs (run --device cuda) or GPU traces",
        )
    layer = getattr(args, "layer", None)
    return analyze(
        window,
        Detection(fdr=args.fdr),
        min_share=parse_percent(args.min_share, "--min-share") / 100,
        clock=args.clock,
        layers=(layer,) if layer is not None else (),
    )


def _show(view: HistoryView, args: argparse.Namespace) -> int:
    from layerprof.history.records import HistoryError

    if args.layer is not None and view.trend(args.layer) is None:
        raise HistoryError(
            f"{args.db}: no layer or figure {args.layer!r} in the newest runs of {view.env.key}",
            hint="layerprof history show lists them; the root layer is ''",
        )
    if args.json:
        import orjson

        from layerprof.history.export import view_json

        print(orjson.dumps(view_json(view), option=orjson.OPT_INDENT_2).decode())
        return 0
    from layerprof.render.console.history import print_history
    from layerprof.render.terminal import make_console

    print_history(view, make_console(), layer=args.layer)
    return 0


def _report(view: HistoryView, args: argparse.Namespace) -> int:
    from layerprof.files import write_atomic
    from layerprof.render.html.history import render_history_html

    path = write_atomic(args.html, render_history_html(view))
    say(f"layerprof: wrote {path}")
    return 0


def _check(view: HistoryView, args: argparse.Namespace) -> int:
    from layerprof.history.gate import describe, judge

    fail_above = parse_percent(args.fail_above, "--fail-above")
    verdict = judge(view, fail_above=fail_above, recent=args.recent)
    print(f"layerprof history check: {'FAIL' if verdict.failed else 'ok'}: {verdict.reason}")
    for change in verdict.regressions[1:]:
        print(f"  also: {describe(change)}")
    for change in verdict.other:
        print(f"  within the gate: {describe(change)}")
    return 1 if verdict.failed else 0


# ---------------------------------------------------------------- export


def _export(args: argparse.Namespace) -> int:
    from layerprof.files import write_atomic
    from layerprof.history.export import history_csv, history_json

    if not (args.csv or args.json):
        raise UsageError("history export needs --csv OUT or --json OUT")
    with _open(args.db) as store:
        if args.csv:
            say(f"layerprof: wrote {write_atomic(args.csv, history_csv(store))}")
        if args.json:
            say(f"layerprof: wrote {write_atomic(args.json, history_json(store))}")
    return 0
