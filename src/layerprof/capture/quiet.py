"""Keep Kineto's own log lines out of the user's terminal.

torch's Kineto (C++) writes ``USDT: ... profiler_start`` / ``STAGE: ...``
lines straight to file descriptor 2 whenever the profiler starts or stops,
and a CUDA build of torch on a machine without a GPU adds
``ERROR: ... gpuGetDeviceCount failed with code 35`` (and its
``gpuGetDeviceProperties`` twin) on every start: Kineto looks for GPUs
whatever activities were asked for. While the profiler runs, fd 2 goes to a
temporary file; afterwards every other line (other errors and warnings, a
model's own prints) is written back to stderr, so nothing but this known
chatter is lost.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# Kineto's own logger writes "SEVERITY:date time pid:tid File.cpp:line] message";
# a glog build "E1123 10:00:00.123 42 File.cpp:47] message".
_KINETO_LINE = re.compile(
    r"^(?:(?:USDT|STAGE):\S* \S+ \d+:\d+ \S+\.cpp:\d+\]"
    r"|(?:.*\.cpp:\d+\] |ERROR: ?)?gpuGetDevice(?:Count|Properties) failed with (?:code )?-?\d+\s*$)"
)


@contextlib.contextmanager
def kineto_quiet() -> Iterator[None]:
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr is not a real file (tests)
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace")
            kept = [ln for ln in text.splitlines(keepends=True) if not _KINETO_LINE.match(ln)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
