#!/usr/bin/env bash
# The test command README.md gives and .ci/run calls: install everything the tests need, then
# run the whole suite. Safe to run again (each step is skipped when already done).
set -euo pipefail
cd "$(dirname "$0")/.."

# Python packages: the CPU build of torch that this workplace keeps on disk, then the project.
python3 -m pip install --quiet "torch==2.13.0" -e ".[engine,test]"

# Debian's Chromium for the HTML report's real-browser tests (they skip, saying why, without it).
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "note: chromium is not installed and this is not root: browser tests will skip" >&2
    fi
fi

python3 -m pytest -q "$@"
