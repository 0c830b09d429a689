#!/usr/bin/env bash
# The default test suite under another torch release (CI runs 2.13.0 only):
#
#   bash scripts/other-torch.sh 2.11.0 [pytest args...]
#
# A release other than 2.13.0 comes from PyPI as a CUDA build (about 3 GB into a
# fresh virtual environment); it runs on the CPU here. torch 2.11 is what the GPU
# machines' image holds: run it before trusting a GPU check's failure to be
# layerprof's (2026-11-28: 9 failures there, none now; 2.15, the newest: 7, none now).
# The venv is kept in $TORCH_VENV (default /tmp/layerprof-torch-<version>) for the next
# run. A release newer than a pip constraint allows: PIP_CONFIG_FILE=/dev/null.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: other-torch.sh VERSION [pytest args...]}"
shift
venv="${TORCH_VENV:-/tmp/layerprof-torch-$version}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    # pandas, dask, fsspec, aiohttp, transformers, accelerate, lightning: the dev extra
    # without ruff, mypy and playwright (the browser tests skip without Chromium)
    "$venv/bin/pip" install -q "torch==$version" numpy rich orjson pytest hypothesis \
        pytest-randomly pandas "dask[distributed]" fsspec aiohttp transformers accelerate \
        lightning
    "$venv/bin/pip" install -q --no-deps -e .
fi
"$venv/bin/python" -c "import torch; print('torch', torch.__version__)"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
