#!/usr/bin/env bash
# Make the browser tests of the HTML report runnable: Debian's Chromium and
# Playwright's Python package. Never runs `playwright install` (that downloads
# browsers from the network); the tests drive /usr/bin/chromium through
# `executable_path`. Idempotent; called by .ci/run.
set -euo pipefail

CHROMIUM="${LAYERPROF_CHROMIUM:-/usr/bin/chromium}"

if [ ! -x "$CHROMIUM" ]; then
    SUDO=""
    if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq chromium >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c "import playwright.sync_api" >/dev/null 2>&1; then
    "$PYTHON" -m pip install --quiet "playwright>=1.40"
fi

"$CHROMIUM" --version 2>/dev/null
"$PYTHON" -c "import playwright, importlib.metadata as m; print('playwright', m.version('playwright'))"
