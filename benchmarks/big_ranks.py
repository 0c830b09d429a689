"""Many big ranks: whole ``layerprof analyze`` processes over N ranks of ~SIZE each.

Builds N rank traces of about ``--size`` bytes of JSON each in one folder:
one ``big_trace.py`` trace (copies of a real trace placed one after another)
written once, then copied N times, each copy differing only in its
``distributedInfo`` (``rank`` r, ``world_size`` N) at the end of the file, so
every rank has its own rank id. Then runs ``layerprof analyze DIR --json
OUT`` once per executor (``--executors dask,processes``), each under ``nice -n
15`` (a shared machine), and prints per run: the wall time, the load average,
the client's (reducer's) peak RSS and each worker process's peak RSS
(``VmHWM`` of every process under the command, polled every 0.2 s), and
whether any worker was replaced (a worker the nanny or the pool restarts, e.g.
after being killed for memory, shows as a new pid). Last, whether the JSON
outputs are byte-identical.

Dask's workers get a stated memory limit: ``--executor dask`` starts a
``LocalCluster`` whose ``memory_limit="auto"`` is the system limit x 1 thread /
cores, and Dask takes the system limit as the smallest of the RAM, the cgroup
limit and ``RLIMIT_RSS`` (which Linux does not enforce); so the command runs
with ``RLIMIT_RSS`` = ``--worker-memory`` x cores, and each worker's nanny
restarts it past 95 % of ``--worker-memory`` (Dask's ``terminate`` fraction).

    python benchmarks/big_ranks.py --size 250MB --ranks 64 --workers 2 \\
        [--dir /tmp/ranks] [--keep] [--worker-memory 1GiB] [--executors dask,processes] \\
        [--no-json] [--src SNAPSHOT/src]

``--trace`` defaults to HTA's 26 MB trace in ``tests/data/hta`` (12 copies, 245 MB,
per 250 MB rank). The rank files and the outputs are deleted at the end unless
``--keep``; a ``--dir`` that already holds ``--ranks`` of them is reused as it is.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from big_trace import DEFAULT_TRACE, plain_text, write

POLL_S = 0.2


def _bytes(text: str) -> int:
    """``250MB`` / ``1GiB`` / ``1e9`` -> bytes."""
    units = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
    t = text.strip().upper()
    for unit, scale in units.items():
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * scale)
    return int(float(t))


def tail_of(doc: dict[str, Any]) -> bytes:
    """What ``big_trace.write`` writes after the events: the other keys, and ``}``."""
    return orjson.dumps(doc)[1:]


def build(source: Path, folder: Path, ranks: int, copies: int) -> list[Path]:
    """``ranks`` traces of ``copies`` copies of ``source`` each, rank r in
    ``trace.rank-r.json`` claiming ``distributedInfo.rank`` r."""
    doc = orjson.loads(plain_text(source))
    doc.pop("traceEvents")
    folder.mkdir(parents=True, exist_ok=True)
    template = folder / ".template.json"
    write(source, template, copies)
    size = template.stat().st_size
    old = tail_of(doc)
    with open(template, "rb") as f:
        f.seek(size - len(old))
        assert f.read() == old, "big_trace.write no longer ends with the source's other keys"
    info = doc.get("distributedInfo", {})
    out = []
    for r in range(ranks):
        path = folder / f"trace.rank-{r}.json"
        new = tail_of({**doc, "distributedInfo": {**info, "rank": r, "world_size": ranks}})
        with open(template, "rb") as src, open(path, "wb") as dst:
            left = size - len(old)
            while left:  # in the kernel: no 250 MB buffer here
                left -= os.copy_file_range(src.fileno(), dst.fileno(), left)
            dst.write(new)
        out.append(path)
    template.unlink()
    return out


def _copy_bytes(source: Path, folder: Path) -> int:
    """The JSON bytes one more copy of ``source`` adds to a big trace."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / ".template.json"
    write(source, probe, 1)
    one = probe.stat().st_size
    write(source, probe, 2)
    return probe.stat().st_size - one


@dataclass
class Proc:
    pid: int
    role: str
    peak: int = 0  # VmHWM, bytes


@dataclass
class Watch:
    """Every process under ``root`` seen while it ran, with its peak RSS."""

    root: int
    procs: dict[int, Proc] = field(default_factory=dict)
    tree_peak: int = 0  # the most RSS the whole tree held at one poll
    stop: threading.Event = field(default_factory=threading.Event)

    def loop(self) -> None:
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(POLL_S)

    def poll(self) -> None:
        total = 0
        for pid in _descendants(self.root) | {self.root}:
            status = _status(pid)
            if not status:
                continue
            proc = self.procs.get(pid)
            if proc is None:
                proc = self.procs[pid] = Proc(pid, _role(pid, self.root))
            proc.peak = max(proc.peak, status.get("VmHWM", 0))
            total += status.get("VmRSS", 0)
        self.tree_peak = max(self.tree_peak, total)


def _parents() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            out[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _status(pid: int) -> dict[str, int]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "client"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    if "resource_tracker" in cmd:
        return "tracker"
    if "forkserver" in cmd and _parents().get(pid) == root:
        return "forkserver"
    if "python" not in cmd and "layerprof" not in cmd:
        return "other"  # e.g. the nice that execs layerprof has the root's pid
    return "worker"


def run(cmd: list[str], rss_limit: int | None, src: Path | None) -> tuple[float, Watch, int, str]:
    """Run ``cmd`` under nice 15 (and RLIMIT_RSS when given); its wall seconds, the
    processes seen, its exit status and the last lines of its stderr."""

    def setup() -> None:
        os.nice(15)
        if rss_limit:
            resource.setrlimit(resource.RLIMIT_RSS, (rss_limit, rss_limit))

    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(src.resolve())} if src else None
    proc = subprocess.Popen(cmd, preexec_fn=setup, stderr=subprocess.PIPE, text=True, env=env)
    watch = Watch(proc.pid)
    poller = threading.Thread(target=watch.loop, daemon=True)
    poller.start()
    _, err = proc.communicate()
    seconds = time.perf_counter() - t0
    watch.stop.set()
    poller.join()
    return seconds, watch, proc.returncode, "\n".join(err.strip().splitlines()[-5:])


def report(name: str, seconds: float, watch: Watch, load: tuple[float, float], limit: int) -> None:
    gb = 2**30
    workers = sorted((p for p in watch.procs.values() if p.role == "worker"), key=lambda p: p.pid)
    client = watch.procs[watch.root].peak
    print(
        f"{name:9}: {seconds:7.1f} s wall (load {load[0]:.1f} -> {load[1]:.1f});"
        f" client (reducer) peak {client / gb:.2f} GiB;"
        f" whole tree at most {watch.tree_peak / gb:.2f} GiB at once"
    )
    peaks = ", ".join(f"{p.peak / gb:.2f}" for p in workers)
    over = [p for p in workers if limit and p.peak > limit]
    print(
        f"{'':9}  {len(workers)} worker processes, peak RSS GiB: {peaks}"
        + (f"; limit {limit / gb:.2f} GiB, {len(over)} over it" if limit else "")
    )
    others = [p for p in watch.procs.values() if p.role not in ("worker", "client")]
    if others:
        print(f"{'':9}  others: " + ", ".join(f"{p.role} {p.peak / gb:.2f}" for p in others))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--size", default="250MB", help="JSON bytes per rank, e.g. 250MB")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--worker-memory", default="1GiB", help="each Dask worker's memory_limit")
    ap.add_argument("--executors", default="dask,processes")
    ap.add_argument("--dir", type=Path, help="where the ranks go (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the ranks and the JSON outputs")
    ap.add_argument(
        "--no-json",
        action="store_true",
        help="write no output (the client's peak without the JSON writer's)",
    )
    ap.add_argument(
        "--src",
        type=Path,
        help="run layerprof from this source tree (e.g. a `git archive` of a commit, so that"
        " a tree changing under a long run does not change what runs)",
    )
    a = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    if a.workers != cores:
        # "dask" starts one worker per core and takes cores for its memory split
        print(f"note: --executor dask starts {cores} workers here (one per core)", file=sys.stderr)
    folder = a.dir or Path(tempfile.mkdtemp(prefix="layerprof-big-ranks-"))
    results = Path(tempfile.mkdtemp(prefix="layerprof-big-ranks-out-"))  # not among the ranks
    reuse = a.dir is not None and len(list(folder.glob("trace.rank-*.json"))) == a.ranks
    try:
        if not reuse:
            copies = max(1, round(_bytes(a.size) / _copy_bytes(a.trace, folder)))
            t0 = time.perf_counter()
            build(a.trace, folder, a.ranks, copies)
            print(f"built {a.ranks} ranks of {copies} copies in {time.perf_counter() - t0:.0f} s")
        files = sorted(folder.glob("trace.rank-*.json"))
        total = sum(f.stat().st_size for f in files)
        print(
            f"{len(files)} ranks, {files[0].stat().st_size / 1e6:.0f} MB each, {total / 1e9:.1f} GB"
        )
        limit = _bytes(a.worker_memory)
        outputs = {}
        for name in a.executors.split(","):
            spec = f"processes={a.workers}" if name == "processes" else name
            out = results / f"{name}.json"
            cmd = [sys.executable, "-m", "layerprof", "analyze", str(folder), "--quiet"]
            cmd += ["--executor", spec] + ([] if a.no_json else ["--json", str(out)])
            before = os.getloadavg()[0]
            dask = name == "dask"
            seconds, watch, rc, err = run(cmd, limit * cores if dask else None, a.src)
            report(name, seconds, watch, (before, os.getloadavg()[0]), limit if dask else 0)
            if rc:
                print(f"{'':9}  exit {rc}: {err}")
            elif not a.no_json:
                outputs[name] = out
        if len(outputs) > 1:
            first, *rest = outputs.values()
            same = all(filecmp.cmp(first, o, shallow=False) for o in rest)
            size = first.stat().st_size
            print(f"JSON outputs ({size / 1e6:.1f} MB, {results}) byte-identical: {same}")
    finally:
        if not a.keep or not any(results.iterdir()):  # only what this script writes
            shutil.rmtree(results)
        if not a.keep:
            for made in folder.glob("trace.rank-*.json"):
                made.unlink()
            (folder / ".template.json").unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()


if __name__ == "__main__":
    main()
