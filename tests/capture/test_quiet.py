from __future__ import annotations

import subprocess
import sys


def test_kineto_lines_dropped_other_stderr_kept() -> None:
    code = (
        "import os, sys\n"
        "from layerprof.capture.quiet import kineto_quiet\n"
        "with kineto_quiet():\n"
        "    os.write(2, b'USDT:2026-11-22 02:23:12 27473:27473 Sync.cpp:52] profiler_start\\n')\n"
        "    os.write(2, b'STAGE:2026-11-22 02:23:12 27473:27473 Sync.cpp:51] Completed Stage\\n')\n"
        # a CUDA build of torch on a machine without a GPU, at every profiler start
        "    os.write(2, b'ERROR:2026-11-22 02:23:12 27473:27473 DeviceProperties.cpp:47]"
        " gpuGetDeviceCount failed with code 35\\n')\n"
        "    os.write(2, b'E1122 02:23:12.123456 27473 DeviceProperties.cpp:47]"
        " gpuGetDeviceCount failed with code 100\\n')\n"
        # other errors, even Kineto's, are the user's to see
        "    os.write(2, b'ERROR:2026-11-22 02:23:12 27473:27473 CuptiActivity.cpp:9] out of memory\\n')\n"
        "    print('model says hi', file=sys.stderr)\n"
        "print('after', file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stderr == (
        "ERROR:2026-11-22 02:23:12 27473:27473 CuptiActivity.cpp:9] out of memory\n"
        "model says hi\nafter\n"
    )
