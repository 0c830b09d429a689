"""Traces under fsspec URLs: listed on the client, read by the workers, within the size
limit; a missing backend or a bad URL is one line, and credentials never show."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec  # the dev extra has it: these tests run in CI, never skip
import pytest

from layerprof import codec
from layerprof.cli import main
from layerprof.errors import TraceError, UsageError
from layerprof.trace import analyze
from layerprof.trace.remote import list_inputs, redact
from tests.rank_traces import cpu_trace, simulate_ranks


@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    one = cpu_trace(tmp_path_factory.mktemp("one") / "trace.json")
    folder = tmp_path_factory.mktemp("ranks")
    simulate_ranks(one, folder, 3)
    return folder


@pytest.fixture
def memory_job(rank_dir: Path) -> Iterator[str]:
    fs = fsspec.filesystem("memory")
    root = "/layerprof-test-job"
    for f in sorted(rank_dir.iterdir()):
        fs.pipe(f"{root}/{f.name}", f.read_bytes())
    fs.pipe(f"{root}/notes.txt", b"not a trace")
    yield f"memory://{root}"
    fs.rm(root, recursive=True)


def _same_ranks(a: Any, b: Any) -> None:
    """The same per-rank results, whatever the files are called."""
    da, db = codec.to_dict(a, samples=True), codec.to_dict(b, samples=True)
    for doc in (da, db):
        doc["path"] = ""
        for r in doc["ranks"]:
            r["meta"]["model"] = ""
            r["meta"]["extra"] = {}
            r["source"]["file"] = ""
    assert da == db


def test_memory_directory_gives_the_local_answer(memory_job: str, rank_dir: Path) -> None:
    names = [s.name for s in list_inputs(memory_job + "/")]
    assert names == [f"{memory_job}/trace.rank-{r}.json.gz" for r in range(3)]
    remote = analyze(memory_job + "/", executor="serial")
    _same_ranks(remote, analyze(rank_dir, executor="serial"))
    assert remote.ranks[1].source is not None
    assert remote.ranks[1].source.file == f"{memory_job}/trace.rank-1.json.gz"


def test_memory_glob(memory_job: str) -> None:
    run = analyze(memory_job + "/trace.rank-[02].json.gz", executor="serial")
    assert [p.rank for p in run.ranks] == [0, 2]


def test_file_urls_with_worker_processes(rank_dir: Path) -> None:
    url = rank_dir.as_uri()  # file:///...: the workers open it themselves
    run = analyze(url, executor="processes=2")
    _same_ranks(run, analyze(rank_dir, executor="serial"))
    assert run.ranks[0].source is not None
    assert run.ranks[0].source.file.startswith("file://")


def test_remote_reads_keep_the_size_limit(memory_job: str) -> None:
    with pytest.raises(TraceError) as exc:
        analyze(memory_job + "/trace.rank-0.json.gz", max_input_size=1024)
    message = str(exc.value)
    assert message.startswith(f"{memory_job}/trace.rank-0.json.gz: expands past the input size")
    assert "--max-input-size" in message


def test_missing_remote_file(memory_job: str) -> None:
    with pytest.raises(TraceError, match="no such file or directory"):
        analyze(memory_job + "/nope.json", executor="serial")


def test_missing_backend_names_the_package(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "s3fs", None)  # not installed, wherever this runs
    assert main(["analyze", "s3://bucket/job/", "-q"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "layerprof: error: s3://bucket/job/: reading s3:// URLs needs the s3fs package,"
        " which is not installed"
    )
    assert err[1] == "  hint: pip install s3fs"


def test_credentials_in_urls_are_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "https://alice:s3cret@example.invalid/job/t.json?sig=T0KEN&se=2030"
    assert redact(url) == "https://example.invalid/job/t.json?sig=...&se=..."
    # Whatever goes wrong with such a URL, its message hides them.
    monkeypatch.setattr(fsspec.core, "url_to_fs", _refuses)
    with pytest.raises((TraceError, UsageError)) as exc:
        list_inputs(url)
    assert "s3cret" not in str(exc.value) and "T0KEN" not in str(exc.value)
    assert "example.invalid/job/t.json" in str(exc.value)


def _refuses(url: str, **_: Any) -> Any:
    raise ValueError(f"could not connect to {url}")


def test_unknown_scheme_is_one_line() -> None:
    with pytest.raises(UsageError) as exc:
        list_inputs("nosuchscheme://x/y.json")
    assert "\n" not in str(exc.value) and "nosuchscheme" in str(exc.value)
