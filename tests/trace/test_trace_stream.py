"""trace/stream.py: decoding as the file is read gives the whole-file reader's tables
(and analysis JSON), whatever the chunk size, and bad input fails in one line within a
bounded buffer (issue 47)."""

from __future__ import annotations

import dataclasses
import gzip
import zlib
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerprof.errors import TraceError
from layerprof.reading import read_input
from layerprof.trace import analyze
from layerprof.trace import reader as reader_mod
from layerprof.trace import stream as stream_mod
from layerprof.trace.events import EventCollector, EventTables
from layerprof.trace.reader import decode, decode_file

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = sorted(
    p
    for p in DATA.rglob("*.json*")
    if p.name.endswith((".json", ".json.gz")) and "profiles" not in p.parts
)


def _whole(path: Path, **kw: Any) -> tuple[dict[str, Any], EventTables]:
    collector = EventCollector(**kw)
    header = decode(read_input(path, error=TraceError), collector.add_batch, str(path))
    return header, collector.finish()


def _streamed(
    path: Path, chunk: int, max_record: int = reader_mod.MAX_RECORD, **kw: Any
) -> tuple[dict[str, Any], EventTables]:
    collector = EventCollector(**kw)
    header = decode_file(path, collector.add_batch, str(path), chunk=chunk, max_record=max_record)
    return header, collector.finish()


def _same(a: Any, b: Any) -> None:
    """Field by field, numpy columns by value and dtype."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b)
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name))
    else:
        assert a == b


def _check(path: Path, chunk: int, **kw: Any) -> None:
    header, tables = _whole(path, **kw)
    s_header, s_tables = _streamed(path, chunk, **kw)
    assert s_header == header
    _same(s_tables, tables)


def _trace_ids(p: Path) -> str:
    return str(p.relative_to(DATA))


def test_checked_in_traces_are_found() -> None:
    assert len(TRACES) >= 20


@pytest.mark.parametrize("path", TRACES, ids=_trace_ids)
def test_every_checked_in_trace_streams_to_the_same_tables(path: Path) -> None:
    """A chunk of 64 KiB (so every file but the smallest goes through the stream path)
    and of 1 MB, against the whole-file reader."""
    try:
        _whole(path)
    except reader_mod.NotATraceError:
        with pytest.raises(reader_mod.NotATraceError):
            _streamed(path, 1 << 16)
        return
    for chunk in (1 << 16, 1 << 20):
        _check(path, chunk, keep_shapes=True)


def test_small_chunks_and_batches_split_records_anywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """8 KiB batches over 3, 1,000 and 12,345-byte chunks: records straddle every chunk
    boundary, and the tail (the last events and the keys after) spans several chunks."""
    path = DATA / "hta" / "trace_filter" / "sampled_rank-0.json.gz"
    header, tables = _whole(path)
    monkeypatch.setattr(reader_mod, "BATCH_BYTES", 1 << 13)
    for chunk in (3, 1000, 12_345):
        s_header, s_tables = _streamed(path, chunk)
        assert s_header == header
        _same(s_tables, tables)


def _events(n: int, *, name: str = "op") -> list[dict[str, Any]]:
    return [
        {"ph": "X", "cat": "cpu_op", "name": f"{name}{i % 7}" + "\x00\x1f\u202e"[: i % 4],
         "pid": 1, "tid": 2,
         "ts": 1_712_195_495_519_689.047 + 3 * i, "dur": 2.5,
         "args": {"External id": i, "Input Dims": [[i % 5, 3], []], "s": '}, {"x": ['}}
        for i in range(n)
    ]  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 120),
    chunk=st.integers(1, 5000),
    batch=st.integers(1, 3000),
    before=st.booleans(),
    gz=st.booleans(),
    indent=st.booleans(),
)
def test_any_chunk_and_batch_size_gives_the_whole_file_tables(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    chunk: int,
    batch: int,
    before: bool,
    gz: bool,
    indent: bool,
) -> None:
    """Epoch-µs float times (the exact ns path reads the batch text), a string that looks
    like a boundary, keys before or after the events, gzip or not, compact or indented."""
    doc: dict[str, Any] = {"traceEvents": _events(n), "distributedInfo": {"rank": 3}}
    if before:
        doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0}], **doc}
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2 if indent else 0)
    path = tmp_path_factory.mktemp("t") / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(text) if gz else text)
    with mock.patch.object(reader_mod, "BATCH_BYTES", batch):
        header, tables = _whole(path)
        s_header, s_tables = _streamed(path, chunk)
    assert s_header == header == {k: v for k, v in doc.items() if k != "traceEvents"}
    assert tables.events == n
    _same(s_tables, tables)


def test_a_bare_array_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bare.json"
    path.write_bytes(orjson.dumps(_events(300)))
    monkeypatch.setattr(reader_mod, "BATCH_BYTES", 1 << 10)
    header, tables = _whole(path)
    s_header, s_tables = _streamed(path, 777)
    assert header == s_header == {}
    assert s_tables.events == 300
    _same(s_tables, tables)


def _torch_211_trace(names: list[str]) -> bytes:
    """torch 2.11's export: an event's head on one line, quotes in names unescaped."""
    events = [
        "  {\n"
        f'    "ph": "X", "cat": "user_annotation", "name": "{name}", "pid": 7, "tid": 7,\n'
        f'    "ts": {1000 + 10 * i}.5, "dur": 5.25,\n'
        '    "args": {\n'
        f'      "External id": {i + 1},"Record function id": 0, "Ev Idx": {i}\n'
        "    }\n"
        "  }"
        for i, name in enumerate(names)
    ]
    head = '{\n  "schemaVersion": 1,\n  "baseTimeNanoseconds": 1790857026000000000,\n'
    return (head + '  "traceEvents": [\n' + ",\n".join(events) + "\n]}\n").encode()


def test_unescaped_quotes_are_requoted_in_a_middle_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad name far from the end: the whole-file reader requotes the rest of the
    file, the stream only the batch that does not parse; same names either way."""
    names = [f"plain {i}" for i in range(400)]
    names[37] = 'say "hi", "pid": 3'
    names[250] = 'q "x"'
    path = tmp_path / "quoted.json"
    path.write_bytes(_torch_211_trace(names))
    monkeypatch.setattr(reader_mod, "BATCH_BYTES", 1 << 10)
    header, tables = _whole(path)
    s_header, s_tables = _streamed(path, 4096)
    assert s_header == header
    _same(s_tables, tables)
    assert {names[37], names[250]} <= set(s_tables.names)


def test_analyze_json_is_the_same_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole analysis, as analyze writes it: a file analyzed through the stream (a
    64 KiB chunk) and given whole as bytes give the same JSON."""
    from layerprof import sinks

    path = DATA / "hta" / "ns_resolution_trace" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    monkeypatch.setattr(stream_mod, "CHUNK_BYTES", 1 << 16)
    streamed = analyze(path, executor="serial")
    whole = analyze(path, data=read_input(path, error=TraceError))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    sinks.write(streamed, a, "json")
    sinks.write(whole, b, "json")
    assert a.read_bytes() == b.read_bytes()


# ---- bad input at size: one line, bounded buffer ---------------------------------


def _one_line(exc: pytest.ExceptionInfo[TraceError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_one_huge_event_is_refused_within_the_cap(tmp_path: Path) -> None:
    """A 3 MB event under a 256 KiB cap (as a 100 MB one under the default 64 MiB):
    refused once the tail passes the cap, not read to the end."""
    big = {"ph": "X", "cat": "cpu_op", "name": "x" * 3_000_000, "ts": 1, "dur": 1}
    path = tmp_path / "huge.json"
    path.write_bytes(orjson.dumps({"traceEvents": [*_events(50), big, *_events(50)]}))
    reads: list[int] = []
    collector = EventCollector()
    with pytest.raises(TraceError) as exc:
        decode_file(
            path, collector.add_batch, "huge.json", chunk=1 << 14, max_record=1 << 18,
            progress=lambda done, size: reads.append(done),
        )  # fmt: skip
    assert "huge.json: no event ends within 256.0 KiB" in _one_line(exc)
    assert reads[-1] < 1_000_000  # stopped near the cap, not at the file's end


def test_an_event_array_that_never_closes(tmp_path: Path) -> None:
    text = orjson.dumps({"traceEvents": _events(2000)})
    path = tmp_path / "open.json"
    path.write_bytes(text[: len(text) * 2 // 3])  # cut mid-array, mid-event
    with pytest.raises(TraceError) as exc:
        _streamed(path, 1 << 12)
    assert _one_line(exc).startswith(f"{path}: not valid JSON")


def test_a_truncated_gzip(tmp_path: Path) -> None:
    raw = gzip.compress(orjson.dumps({"traceEvents": _events(5000)}))
    path = tmp_path / "cut.json.gz"
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceError) as exc:
        _streamed(path, 1 << 12)
    assert _one_line(exc) == f"{path}: truncated gzip (the file ends mid-stream)"


def test_a_gzip_bomb_stops_at_the_ceiling(tmp_path: Path) -> None:
    """64 MB of blanks in 64 KB of gzip against a 1 MiB ceiling: refused after about
    the ceiling's worth of text, counted as it is inflated."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = squeeze.compress(b'{"traceEvents": [' + b" " * (64 << 20)) + squeeze.flush()
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(body)
    collector = EventCollector()
    with pytest.raises(TraceError) as exc:
        decode_file(path, collector.add_batch, "bomb", limit=1 << 20, chunk=1 << 16)
    assert "bomb: expands past the input size limit of 1.0 MiB" in _one_line(exc)


def test_not_json_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bin.json"
    path.write_bytes(b"\x00\x01garbage" * 1000)
    with pytest.raises(TraceError) as exc:
        _streamed(path, 64)
    assert "not JSON or gzip" in _one_line(exc)


# ---- saying it: bytes read, peak memory ----------------------------------------


def test_read_progress_counts_the_file_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """One local file read here: the callback sees the file's bytes (compressed, as on
    disk) rise to its size."""
    path = DATA / "hta" / "trace_filter" / "sampled_rank-0.json.gz"
    monkeypatch.setattr(stream_mod, "CHUNK_BYTES", 1 << 16)
    seen: list[tuple[int, int | None]] = []
    analyze(path, read_progress=lambda done, size: seen.append((done, size)))
    size = path.stat().st_size
    assert len(seen) > 2
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1] == (size, size)


def test_verbose_prints_peak_memory_and_no_bar_off_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from layerprof.cli import main

    path = DATA / "hta" / "trace_filter" / "sampled_rank-0.json.gz"
    assert main(["analyze", str(path), "-q", "--verbose"]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("layerprof: peak memory "), err
    assert "(resident, this process; worker processes" in lines[0]


def test_the_bytes_bar_shows_only_when_enabled_and_after_a_second(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from layerprof.cli import readbar

    off = readbar.BytesRead(enabled=False)
    off.update(10, 100)
    assert off._bar is None
    clock = iter([0.0, 0.5, 2.0])
    monkeypatch.setattr(readbar, "monotonic", lambda: next(clock))
    on = readbar.BytesRead(enabled=True)
    on.update(10, 100)  # half a second in: nothing yet
    assert on._bar is None
    on.update(50, 100)
    assert on._bar is not None
    on.close()
    assert on._bar is None


def test_a_batch_view_that_outlives_its_call_does_not_stop_the_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dask's sampling profiler holds the frames it reads, and with them a batch's
    memoryview of the buffer: the buffer can then not be resized (BufferError, one
    rank in 64 failed so). Every view is kept here; the tables are still the same."""
    path = DATA / "hta" / "trace_filter" / "sampled_rank-0.json.gz"
    header, tables = _whole(path)
    held: list[Any] = []
    parsed = reader_mod._parsed

    def holding(text: memoryview, requote: bool) -> Any:
        held.append(text)
        return parsed(text, requote)

    monkeypatch.setattr(reader_mod, "_parsed", holding)
    monkeypatch.setattr(reader_mod, "BATCH_BYTES", 1 << 12)
    s_header, s_tables = _streamed(path, 5000)
    assert len(held) > 10
    assert s_header == header
    _same(s_tables, tables)
