"""Traces under fsspec URLs: listed on the client, read by the workers, within the size
limit; a missing backend or a bad URL is one line, and credentials never show. http(s)
is read from local servers in threads: a real one, one that never stops sending, one
that never answers."""

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
from layerprof.trace.jobs.remote import list_inputs, redact, scrub, wildcard
from tests.support.http_servers import endless, serving, silent, stalling
from tests.support.rank_traces import cpu_trace, simulate_ranks


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
    assert remote.ranks[1].trace.source is not None
    assert remote.ranks[1].trace.source.file == f"{memory_job}/trace.rank-1.json.gz"


def test_memory_glob(memory_job: str) -> None:
    run = analyze(memory_job + "/trace.rank-[02].json.gz", executor="serial")
    assert [p.rank for p in run.ranks] == [0, 2]


def test_file_urls_with_worker_processes(rank_dir: Path) -> None:
    url = rank_dir.as_uri()  # file:///...: the workers open it themselves
    run = analyze(url, executor="processes=2")
    _same_ranks(run, analyze(rank_dir, executor="serial"))
    assert run.ranks[0].trace.source is not None
    assert run.ranks[0].trace.source.file.startswith("file://")


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


# --- http(s): a local server in a thread (tests/http_servers.py) ---------------------

USER, SECRET = "alice7Q", "S3CRETPW"
# How the secret may be spelled: as typed, percent-encoded (%43 is C), and the user name.
SPELLINGS = (SECRET, "S3%43RETPW", USER)


@pytest.fixture(scope="module")
def site(rank_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the server holds: one trace, a folder of ranks, a folder of non-traces."""
    root = tmp_path_factory.mktemp("site")
    (root / "trace.json").write_bytes(cpu_trace(root / "one.json").read_bytes())
    (root / "one.json").unlink()
    (root / "ranks").mkdir()
    for f in rank_dir.iterdir():
        (root / "ranks" / f.name).write_bytes(f.read_bytes())
    (root / "nontr").mkdir()
    (root / "nontr" / "a.json").write_text('{"a": 1}')
    (root / "nontr" / "b.json").write_text('{"b": 2}')
    return root


@pytest.fixture
def private(site: Path) -> Iterator[tuple[str, list[str]]]:
    """``(host:port, request lines)`` of a server that wants alice's password."""
    with serving(site, auth=(USER, SECRET)) as server:
        yield server


def _no_secret(*texts: str) -> None:
    for text in texts:
        for spelling in SPELLINGS:
            assert spelling not in text


def test_http_url_with_a_password_leaves_it_nowhere(
    private: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host, _ = private
    for password in (SECRET, "S3%43RETPW"):  # the server decodes %43: both log in
        url = f"http://{USER}:{password}@{host}/trace.json"
        out_json, out_html = tmp_path / "o.json", tmp_path / "o.html"
        assert main(["analyze", url, "--json", str(out_json), "--html", str(out_html)]) == 0
        said = capsys.readouterr()
        saved = out_json.read_text()
        _no_secret(said.out, said.err, saved, out_html.read_text())
        assert f"http://{host}/trace.json" in said.out
        assert codec.load(out_json).path == f"http://{host}/trace.json"  # type: ignore[union-attr]


def test_http_errors_with_a_password_never_show_it(
    private: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host, _ = private
    for password in (SECRET, "S3%43RETPW"):
        base = f"http://{USER}:{password}@{host}"
        cases = {
            f"{base}/nontr/": f"http://{host}/nontr/: no readable trace among 2 files",
            f"{base}/nope.json": f"http://{host}/nope.json: no such file",
            f"{base}/nope/": f"http://{host}/nope/: no such page",
            f"http://{USER}:wrong{password}@{host}/trace.json": f"http://{host}/trace.json:"
            " cannot read it (ClientResponseError: 401",
        }
        for url, expected in cases.items():
            assert main(["analyze", url, "--executor", "serial"]) == 2
            said = capsys.readouterr()
            assert said.err.startswith(f"layerprof: error: {expected}"), said.err
            _no_secret(said.out, said.err)
        for args in (
            ["diff", f"{base}/trace.json", str(tmp_path / "b.json")],
            ["report", f"{base}/trace.json"],
            ["report", str(tmp_path / "a.json"), f"{base}/p.rank-1.json?sig=T0KEN"],
        ):
            assert main(args) == 2
            said = capsys.readouterr()
            assert said.err.startswith("layerprof: error: http://"), said.err
            assert f"{args[0]} reads files on this machine, not URLs" in said.err
            _no_secret(said.out, said.err.replace("T0KEN", ""))
            assert "T0KEN" not in said.err


def test_http_folder_listing_keeps_the_credentials_for_the_workers(
    private: tuple[str, list[str]], rank_dir: Path
) -> None:
    host, seen = private
    url = f"http://{USER}:{SECRET}@{host}/ranks/"
    names = [s.name for s in list_inputs(url)]
    assert names == [f"http://{host}/ranks/trace.rank-{r}.json.gz" for r in range(3)]
    run = analyze(url, executor="processes=2")  # each worker logs in by itself
    _same_ranks(run, analyze(rank_dir, executor="serial"))
    assert run.path == f"http://{host}/ranks/"
    globbed = analyze(f"http://{USER}:{SECRET}@{host}/ranks/trace.rank-[12].json.gz")
    assert [p.rank for p in globbed.ranks] == [1, 2]
    assert not [line for line in seen if " 401 " in line]
    _no_secret(repr(list_inputs(url)), repr(run.failed), repr(run.notes))


def test_http_url_with_a_query_is_one_file(
    site: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with serving(site) as (host, seen):
        url = f"http://{host}/trace.json?sig=T0KEN%2Bx&se=2030-01-01"
        out_json = tmp_path / "q.json"
        assert main(["analyze", url, "--json", str(out_json)]) == 0
        said = capsys.readouterr()
        assert "GET /trace.json?sig=T0KEN%2Bx&se=2030-01-01 HTTP/1.1" in seen
        shown = f"http://{host}/trace.json?sig=...&se=..."
        assert codec.load(out_json).path == shown  # type: ignore[union-attr]
        for text in (said.out, said.err, out_json.read_text()):
            # the whole value: a bare "2030" may be digits of a timing (0.1320307)
            assert "T0KEN" not in text and "2030-01-01" not in text
        # A query never makes a pattern, also where the file is missing.
        assert main(["analyze", f"http://{host}/nope.json?sig=T0KEN"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"layerprof: error: http://{host}/nope.json?sig=...: no such file")
        assert "T0KEN" not in err


def test_http_listing_stops_at_the_input_size_limit(capsys: pytest.CaptureFixture[str]) -> None:
    with endless() as host:
        # A folder URL: the listing page is read in chunks, never past the limit.
        assert main(["analyze", f"http://{host}/job/", "--max-input-size", "1M"]) == 2
        assert capsys.readouterr().err.splitlines()[0] == (
            f"layerprof: error: http://{host}/job/: the listing is larger than the input"
            " size limit of 1.0 MiB; raise it with --max-input-size"
        )
        # A file URL is read as a file (never listed), within the same limit.
        assert [s.name for s in list_inputs(f"http://{host}/trace.json")] == [
            f"http://{host}/trace.json"
        ]
        with pytest.raises(TraceError, match=r"is larger than the input size limit of 1\.0 MiB"):
            analyze(f"http://{host}/trace.json", max_input_size=1 << 20)


def test_http_read_from_a_silent_server_times_out_by_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with silent() as host:
        for url in (f"http://{host}/trace.json?sig=T0KEN", f"http://{host}/job/"):
            assert main(["analyze", url, "--timeout", "0.5", "--executor", "serial"]) == 2
            err = capsys.readouterr().err.splitlines()
            assert err == [
                f"layerprof: error: {redact(url)}: the server did not answer within 0.5 s",
                "  hint: wait longer with --timeout SECONDS",
            ]


def test_http_read_that_stalls_midway_times_out_by_name() -> None:
    with stalling() as host, pytest.raises(TraceError) as exc:
        analyze(f"http://{host}/trace.json", timeout=0.5, executor="serial")
    assert str(exc.value) == f"http://{host}/trace.json: the server did not answer within 0.5 s"


def test_timeout_must_be_positive_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("0", "-1", "soon", "nan"):
        assert main(["analyze", "x.json", "--timeout", bad]) == 2
        assert "--timeout" in capsys.readouterr().err


def test_wildcards_in_urls() -> None:
    assert wildcard("s3://b/job/*.json.gz")
    assert wildcard("https://h/job/trace.rank-[0-3].json")
    assert not wildcard("https://h/job/trace.json?sig=a*b[c]")  # a query: one file
    assert not wildcard("https://h/job/trace?.json")  # ? starts a query, never a wildcard


def test_scrub_hides_every_spelling_of_the_secrets() -> None:
    url = "https://alice:p%40ss%2Fw0rd@h.example/t.json?sig=T0K%2BEN&x=1"
    said = (
        "ClientResponseError: 403, url=URL('https://alice:p@ss/w0rd@h.example/t.json"
        "?sig=T0K+EN&x=1') for T0K+EN and p@ss/w0rd"
    )
    text = scrub(said, url)
    for secret in ("p@ss/w0rd", "p%40ss", "T0K+EN", "T0K%2BEN", "alice"):
        assert secret not in text
    assert "h.example/t.json" in text


def test_redact_hides_a_password_that_breaks_the_url() -> None:
    """A password with a "/", "?" or "#" not percent-encoded cuts the authority short:
    whatever then parses as host or path must not be the password."""
    for sep in "/?#":
        url = f"https://alice7Q:pa{sep}ss9@h.example/job/t.json?sig=T0KEN"
        assert redact(url) == "https://h.example/job/t.json?sig=..."
    assert redact("https://h.example/@scope/t.json") == "https://h.example/@scope/t.json"
    assert redact("https://[broken/t.json") == "https://..."
    assert redact("https://h.example/t.json?BareT0KEN&a=b") == "https://h.example/t.json?...&a=..."


def test_missing_http_backend_names_it_without_the_secrets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # not installed
    assert main(["analyze", f"https://{USER}:{SECRET}@h.example/t.json?sig=T0KEN"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "layerprof: error: https://h.example/t.json?sig=...: reading https:// URLs needs the"
        " aiohttp package, which is not installed",
        "  hint: pip install aiohttp",
    ]
