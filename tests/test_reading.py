"""Every JSON input is read once, into one buffer, and never past the size ceiling."""

from __future__ import annotations

import gc
import gzip
import os
import resource
import subprocess
import sys
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
    assert analyze(path, max_input_size=1 << 20).ranks[0].trace.source.events == 50


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
    assert analyze(fifo(trace_bytes(4), 0)).ranks[0].trace.source.events == 4
    assert analyze(fifo(gzip.compress(trace_bytes(5)), 0)).ranks[0].trace.source.events == 5


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


# A gzip bomb under a memory limit (issue 43, item 15): 3 MB expanding to 3 GB, within the
# default ceiling, crashed orjson (SIGSEGV: it does not raise when an allocation fails).

_LIMITED_ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
_ADDRESS_SPACE = 900 << 20  # python, numpy and layerprof take ~300 MB of it


def _zeros_bomb(path: Path, megabytes: int) -> Path:
    """``[0,0,...]``: one piece with no event boundary, 12x its size for orjson to parse."""
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(b"[")
        for _ in range(megabytes):
            out.write(b"0," * (1 << 19))
        out.write(b"0]")
    return path


def _limited(*argv: str) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (_ADDRESS_SPACE, _ADDRESS_SPACE))

    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=300,
        preexec_fn=limit, env=_LIMITED_ENV,
    )  # fmt: skip


def test_a_bomb_that_fits_the_ceiling_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    # 56 MB of JSON, 12x that to parse: without the check this crashed (SIGSEGV) here
    bomb = _zeros_bomb(tmp_path / "bomb.json.gz", 56)
    assert bomb.stat().st_size < 1 << 20
    done = _limited("-m", "layerprof", "analyze", str(bomb), "--max-input-size", "64M", "-q")
    assert done.returncode == 2, (done.returncode, done.stderr)  # not -11 (SIGSEGV)
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"layerprof: error: {bomb}: decoding its 56.0 MiB of JSON in one piece")
    assert "more than the" in first and "Traceback" not in done.stderr


def test_the_default_ceiling_sees_the_address_space_limit() -> None:
    code = "from layerprof import machine, reading; print(machine.available_memory(), reading.default_limit())"
    done = _limited("-c", code)
    room, ceiling = (int(x) for x in done.stdout.split())
    assert 0 < room < _ADDRESS_SPACE and ceiling == room // 2, done.stderr


def test_a_bare_array_trace_is_decoded_in_batches(tmp_path: Path) -> None:
    """Chrome's bare array format was parsed in one piece (12x its size at once)."""
    from layerprof.trace.reader import BATCH_BYTES, decode

    events = orjson.loads(trace_bytes(20_000))["traceEvents"]
    text = orjson.dumps(events)
    assert len(text) > 4 * BATCH_BYTES
    batches: list[int] = []
    assert decode(bytearray(text), lambda got, _text: batches.append(len(got)), "t") == {}
    assert len(batches) > 4 and sum(batches) == len(events)
    path = tmp_path / "bare.json"
    path.write_bytes(text)
    keyed = tmp_path / "keyed.json"
    keyed.write_bytes(trace_bytes(20_000))
    sources = [analyze(p).ranks[0].trace.source for p in (path, keyed)]
    assert [s.events if s else None for s in sources] == [20_000, 20_000]
