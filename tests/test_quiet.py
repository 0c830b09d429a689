from __future__ import annotations

import subprocess
import sys


def test_kineto_lines_dropped_other_stderr_kept() -> None:
    code = (
        "import os, sys\n"
        "from layerprof.quiet import kineto_quiet\n"
        "with kineto_quiet():\n"
        "    os.write(2, b'USDT:2026-11-22 02:23:12 27473:27473 Sync.cpp:52] profiler_start\\n')\n"
        "    os.write(2, b'STAGE:2026-11-22 02:23:12 27473:27473 Sync.cpp:51] Completed Stage\\n')\n"
        "    print('model says hi', file=sys.stderr)\n"
        "print('after', file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stderr == "model says hi\nafter\n"
