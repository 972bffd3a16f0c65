#!/usr/bin/env bash
# The test command README.md gives and .ci/run calls: install everything the tests need, then
# run the whole suite. Safe to run again (each step is skipped when already done).
set -euo pipefail
cd "$(dirname "$0")/.."

# Python packages: the CPU build of torch that this workplace keeps on disk, then the project.
python3 -m pip install --quiet "torch==2.13.0" -e ".[engine,test]"

python3 -m pytest -q "$@"
