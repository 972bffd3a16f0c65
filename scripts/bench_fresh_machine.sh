#!/usr/bin/env bash
# The README's two set-up commands on a machine that has never seen golden-replay, inside a
# virtualenv made with a Python that has no torch, timed: `bash scripts/bench_fresh_machine.sh
# WORK_DIR` (docs/benchmarks.md, "The README's two commands from nothing"); `--dry-run WORK_DIR`
# checks the base Python and prints the plan, running nothing.
#
# "Never seen": an empty HOME (so no ~/.cache/golden-replay: no engine venvs, no llama.cpp build,
# no tiny models; and no pip cache: every wheel is fetched again), a fresh clone of this
# checkout's HEAD, and a plain virtualenv (no --system-site-packages) made from a base Python
# WITHOUT torch ($GOLDEN_FRESH_PYTHON, else the first of /usr/bin/python3.11, /usr/bin/python3,
# python3 that lacks it): a base with torch (or the converter's packages beside it) is refused,
# since what it holds could hide what the install misses. What it cannot take away: the Debian
# packages already installed (scripts/test.sh's apt step then has nothing to do) and the package
# index and wheel folder pip is configured with. It needs git, the base Python with venv, and
# whatever scripts/test.sh needs (gcc, cmake, network to the package registries).
#
# Two passes, each the two commands, each must exit 0 with no test skipped (pytest's summary
# lines are grepped for "skipped"): (a) in the foreground, from nothing; (b) again in the same
# clone, venv and HOME (warm: the installers' stamps hold), as a background job of a
# non-interactive shell (`bash -c 'cmd & wait'`), which starts it with SIGINT ignored, as
# `nohup`, a script's `cmd &` and many CI runners do: the suite must pass started that way too
# (tests/support/signals.py). Start the script itself from a terminal, so pass (a) has SIGINT at
# its default. Each command's output is kept in WORK_DIR/logs/.
set -uo pipefail
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
WORK="${1:?usage: bash scripts/bench_fresh_machine.sh [--dry-run] WORK_DIR (made empty: an old one is removed)}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"

has_torch() {  # has_torch PYTHON: true when PYTHON can import torch
    "$1" -c 'import importlib.util, sys; sys.exit(0 if importlib.util.find_spec("torch") else 1)' 2>/dev/null
}
if [ -n "${GOLDEN_FRESH_PYTHON:-}" ]; then
    BASE_PY="$GOLDEN_FRESH_PYTHON"
else
    BASE_PY=""
    for candidate in /usr/bin/python3.11 /usr/bin/python3 python3; do
        if command -v "$candidate" >/dev/null && ! has_torch "$candidate"; then BASE_PY="$candidate"; break; fi
    done
    [ -n "$BASE_PY" ] || { echo "error: every candidate base Python has torch; hint: set GOLDEN_FRESH_PYTHON to a Python without it" >&2; exit 2; }
fi
"$BASE_PY" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null || {
    echo "error: $BASE_PY cannot make a Python >= 3.11 venv; hint: set GOLDEN_FRESH_PYTHON" >&2; exit 2; }
if has_torch "$BASE_PY"; then
    echo "error: $BASE_PY has torch, so a fresh machine's missing packages could hide behind it; hint: set GOLDEN_FRESH_PYTHON to a Python without torch" >&2
    exit 2
fi

# Other commands rehearse the script itself in seconds (tests/integration/test_bench_fresh_machine.py).
README_1='pip install "torch==2.13.0" -e ".[engine,test]" && golden demo'
COMMAND_1="${GOLDEN_FRESH_COMMAND_1:-$README_1}"
COMMAND_2="${GOLDEN_FRESH_COMMAND_2:-bash scripts/test.sh}"
if [ "$DRY" = 1 ]; then
    echo "bench_fresh_machine: base Python $BASE_PY (no torch); would clone $REPO into $WORK/repo, HOME=$WORK/home, venv $WORK/venv"
    echo "pass foreground: $COMMAND_1; then $COMMAND_2"
    echo "pass background: bash -c 'CMD & wait' (SIGINT ignored), each command again"
    echo "each must exit 0 with no \"skipped\" in pytest's summary"
    exit 0
fi

rm -rf "$WORK" && mkdir -p "$WORK/home" "$WORK/logs"
git clone -q "$REPO" "$WORK/repo"
export HOME="$WORK/home" GOLDEN_TEST_LOGS="$WORK/logs"
unset VIRTUAL_ENV PYTHON GOLDEN_SGLANG_VENV GOLDEN_SGLANG_CPU_VENV GOLDEN_VLLM_VENV GOLDEN_ROUTER_VENV
cd "$WORK/repo"
echo "bench_fresh_machine: $(git rev-parse --short HEAD) in $WORK, base $BASE_PY, started $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$BASE_PY" -m venv "$WORK/venv"
# shellcheck disable=SC1091
source "$WORK/venv/bin/activate"
if has_torch python; then echo "error: the new venv sees a torch before the install" >&2; exit 2; fi

FAILED=0
run_timed() {  # run_timed PASS NUMBER COMMAND: one command, its exit, seconds and skipped tests
    local pass="$1" number="$2" command="$3" log="$WORK/logs/$1-command-$2.log" start rc skipped
    start=$(date +%s)
    if [ "$pass" = background ]; then
        bash -c "$command & wait \$!" > "$log" 2>&1
    else
        bash -c "$command" 2>&1 | tee "$log"
    fi
    rc=${PIPESTATUS[0]}
    skipped="$(grep -E '[0-9]+ skipped.* in [0-9.]+s' "$log" | tail -3)"  # pytest's summary lines
    echo "bench_fresh_machine: $pass command $number ($command): exit $rc, $(( $(date +%s) - start )) s${skipped:+, SKIPPED: $skipped}"
    [ "$rc" = 0 ] && [ -z "$skipped" ] || FAILED=1
}
run_timed foreground 1 "$COMMAND_1"
run_timed foreground 2 "$COMMAND_2"
run_timed background 1 "$COMMAND_1"
run_timed background 2 "$COMMAND_2"
echo "bench_fresh_machine: ended $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg); disk: $(du -sh "$WORK/venv" | cut -f1) venv, $(du -sh "$WORK/home/.cache/golden-replay" | cut -f1) in ~/.cache/golden-replay"
[ "$FAILED" = 0 ]
