"""Every JSON input is read once, into one buffer, and never past the size ceiling."""

from __future__ import annotations

import gc
import gzip
import os
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from layerprof.cli import main
from layerprof.cli.sources import load_comparable, read_json
from layerprof.codec import load as load_profile
from layerprof.errors import LayerprofError, ProfileFormatError, TraceError
from layerprof.reading import default_limit, format_size, parse_size, read_input
from layerprof.trace import analyze

EVENT = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2}


def trace_bytes(events: int = 3) -> bytes:
    evs = [{**EVENT, "ts": 10 * i} for i in range(events)]
    return orjson.dumps({"traceEvents": evs, "distributedInfo": {"rank": 0}})


def peak_of(fn: Callable[[], object]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def one_line(exc: pytest.ExceptionInfo[LayerprofError], *needles: str) -> str:
    message = str(exc.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


@pytest.mark.parametrize(
    ("text", "size"),
    [("64G", 64 << 30), ("512m", 512 << 20), ("1.5GiB", 3 << 29), ("100", 100), ("2 kb", 2048)],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "G", "-1G", "0", "12Q", "1e9"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_default_limit_is_at_most_16g() -> None:
    assert 0 < default_limit() <= 16 << 30
    assert format_size(16 << 30) == "16.0 GiB"


def test_gzip_bomb_stops_at_the_ceiling_without_inflating_it(tmp_path: Path) -> None:
    """200 MB of JSON in a 200 KB gzip: refused after 4 MiB, with how to raise the limit."""
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb") as out:
        out.write(b'{"traceEvents": [')
        for _ in range(200):
            out.write(b" " * (1 << 20))
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(TraceError) as exc:
        analyze(bomb, max_input_size=4 << 20)
    one_line(exc, str(bomb), "expands past the input size limit of 4.0 MiB", "--max-input-size")

    def refused() -> None:
        with pytest.raises(LayerprofError):
            read_input(bomb, limit=4 << 20)

    assert peak_of(refused) < 12 << 20  # the ceiling plus a few chunks, never the 200 MB


def test_plain_file_over_the_ceiling_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(trace_bytes(50))
    with pytest.raises(TraceError) as exc:
        analyze(path, max_input_size=100)
    one_line(exc, str(path), "is larger than the input size limit of 100 bytes")
    assert analyze(path, max_input_size=1 << 20).ranks[0].source.events == 50


def test_dev_zero_fails_at_once() -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    with pytest.raises(TraceError) as exc:
        analyze("/dev/zero")
    one_line(exc, "/dev/zero", "not JSON or gzip")


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Callable[[bytes, int], Path]]:
    """A FIFO fed by a thread: ``data`` once, then ``repeat`` more copies of its tail."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    threads: list[threading.Thread] = []

    def make(data: bytes, repeat: int = 0) -> Path:
        path = tmp_path / f"pipe{len(threads)}.json"
        os.mkfifo(path)

        def feed() -> None:
            try:
                with open(path, "wb") as out:
                    out.write(data)
                    for _ in range(repeat):
                        out.write(b" " * 65536)
            except BrokenPipeError:
                pass  # the reader stopped at its ceiling

        thread = threading.Thread(target=feed, daemon=True)
        thread.start()
        threads.append(thread)
        return path

    yield make
    for thread in threads:
        thread.join(timeout=10)


def test_fifo_is_read_with_the_same_ceiling(fifo: Callable[[bytes, int], Path]) -> None:
    endless = fifo(b'{"traceEvents": [', 10_000)  # 650 MB of blanks if read to the end
    with pytest.raises(TraceError) as exc:
        analyze(endless, max_input_size=2 << 20)
    one_line(exc, "is larger than the input size limit of 2.0 MiB")


def test_fifo_trace_and_fifo_gzip_are_analyzed(fifo: Callable[[bytes, int], Path]) -> None:
    assert analyze(fifo(trace_bytes(4), 0)).ranks[0].source.events == 4
    assert analyze(fifo(gzip.compress(trace_bytes(5)), 0)).ranks[0].source.events == 5


def test_diff_reads_a_pipe_once(fifo: Callable[[bytes, int], Path]) -> None:
    """``layerprof diff <(zcat a.json.gz) b.json``: sniffed and decoded from one read."""
    profile, _ = load_comparable(str(fifo(gzip.compress(trace_bytes(6)), 0)))
    assert profile.meta.source == "trace"


def test_uncompressed_read_is_one_buffer(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(trace_bytes(200_000))
    size = path.stat().st_size
    assert peak_of(lambda: read_input(path)) <= 1.1 * size


def test_gzip_read_is_one_buffer(tmp_path: Path) -> None:
    path = tmp_path / "big.json.gz"
    raw = trace_bytes(200_000)
    path.write_bytes(gzip.compress(raw))
    assert read_input(path) == raw
    assert peak_of(lambda: read_input(path)) <= 1.3 * len(raw)


def test_gzip_members_and_trailing_zeros(tmp_path: Path) -> None:
    raw = trace_bytes(30)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(raw[:100]) + gzip.compress(raw[100:]) + b"\0" * 512)
    assert read_input(path) == raw


def test_a_lying_gzip_trailer_allocates_nothing_big(tmp_path: Path) -> None:
    """The trailer sizes the buffer only when plausible; zlib then finds the lie."""
    raw = trace_bytes(1000)
    packed = bytearray(gzip.compress(raw))
    for claimed in (0, 7, len(raw) * 3, 0xFFFFFFFF):
        packed[-4:] = claimed.to_bytes(4, "little")
        path = tmp_path / f"lie{claimed}.json.gz"
        path.write_bytes(packed)

        def refused(path: Path = path) -> None:
            with pytest.raises(TraceError) as exc:
                read_input(path, error=TraceError)
            one_line(exc, "corrupt gzip")

        assert peak_of(refused) < 64 * len(packed) + (4 << 20)


def test_profiles_and_diffs_are_bounded_too(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(orjson.dumps({"schema": "layerprof.profile/1", "pad": "x" * 5000}))
    with pytest.raises(ProfileFormatError) as exc:
        load_profile(path, max_input_size=1000)
    one_line(exc, "input size limit")
    with pytest.raises(ProfileFormatError):
        read_json(path, max_input_size=1000)
    with pytest.raises(ProfileFormatError):
        load_comparable(str(path), max_input_size=1000)


def test_cli_max_input_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(trace_bytes(300)))
    for argv in (
        ["analyze", str(path), "-q", "--max-input-size", "1K"],
        ["--max-input-size", "1K", "analyze", str(path), "-q"],
        ["diff", str(path), str(path), "--max-input-size", "1K"],
        ["report", str(path), "--max-input-size", "1K"],
    ):
        assert main(argv) == 2, argv
        lines = capsys.readouterr().err.splitlines()
        assert lines[0].startswith("layerprof: error: ") and len(lines) == 1, lines
        assert "--max-input-size" in lines[0] and "Traceback" not in lines[0]
    assert main(["analyze", str(path), "-q", "--max-input-size", "1M"]) == 0
    assert main(["analyze", str(path), "--max-input-size", "lots"]) == 2
    assert "is not a size" in capsys.readouterr().err
