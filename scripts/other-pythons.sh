#!/usr/bin/env bash
# The oldest and newest Python that pyproject admits, on the torch-free core
# (trace analysis, saved profiles, output files): torch 2.13.0 is on these
# machines for Python 3.11 only, so the full suite runs there (.ci/run's main
# step) and these interpreters run every test module that needs no torch.
# A Python that is not installed is reported and skipped, not failed.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_FREE_TESTS=(
    tests/test_files.py tests/pivot/test_profile_props.py tests/test_reading.py
    tests/trace/test_trace_errors.py tests/trace/test_trace_fuzz.py tests/trace/test_trace_nesting.py
    tests/trace/test_trace_props.py tests/trace/test_trace_ranks.py tests/trace/distributed/test_trace_distributed_hta.py
)
for version in "$@"; do
    python=""
    if command -v pyenv >/dev/null; then
        installed="$(pyenv versions --bare | grep -E "^${version//./\\.}(\.|$)" | tail -1 || true)"
        [ -n "$installed" ] && python="$(pyenv prefix "$installed")/bin/python"
    fi
    # pyenv's shims answer `command -v` for versions they cannot run: try it
    if [ -z "$python" ] && "python$version" -c '' 2>/dev/null; then
        python="$(command -v "python$version")"
    fi
    if [ -z "$python" ] || [ ! -x "$python" ]; then
        echo "SKIPPED: Python $version is not installed here" >&2
        continue
    fi
    venv="$(mktemp -d)/venv$version"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q numpy rich orjson pytest hypothesis
    "$venv/bin/pip" install -q --no-deps -e .
    echo "== Python $version: the torch-free tests =="
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${TORCH_FREE_TESTS[@]}"
    rm -rf "$(dirname "$venv")"
done
