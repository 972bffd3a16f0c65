#!/usr/bin/env bash
# The README's two set-up commands on a machine that has never seen golden-replay, inside a
# virtualenv, timed: `bash scripts/bench_fresh_machine.sh WORK_DIR` (docs/benchmarks.md,
# "The README's two commands from nothing").
#
# "Never seen": an empty HOME (so no ~/.cache/golden-replay: no engine venvs, no llama.cpp build,
# no tiny models; and no pip cache: every wheel is fetched again), a fresh clone of this
# checkout's HEAD, and a plain virtualenv (no --system-site-packages) made from the python3 on
# PATH. What it cannot take away: the Debian packages already installed (scripts/test.sh's apt
# step then has nothing to do) and the package index and wheel folder pip is configured with.
# It needs git, python3 with venv, and whatever scripts/test.sh needs (gcc, cmake, network to the
# package registries).
#
# Start it with SIGINT at its default (from a terminal, or `setsid` from a program), not as a
# background job of a shell without job control: that job inherits SIGINT ignored, and the tests
# of golden's Ctrl-C handling then see golden honour that (tests/support/signals.py).
set -uo pipefail
WORK="${1:?usage: bash scripts/bench_fresh_machine.sh WORK_DIR (made empty: an old one is removed)}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
BASE_PY="$(python3 -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')"
rm -rf "$WORK" && mkdir -p "$WORK/home" "$WORK/logs"
git clone -q "$REPO" "$WORK/repo"
export HOME="$WORK/home" GOLDEN_TEST_LOGS="$WORK/logs"
unset VIRTUAL_ENV PYTHON GOLDEN_SGLANG_VENV GOLDEN_SGLANG_CPU_VENV GOLDEN_VLLM_VENV GOLDEN_ROUTER_VENV
cd "$WORK/repo"
echo "bench_fresh_machine: $(git rev-parse --short HEAD) in $WORK, started $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$BASE_PY" -m venv "$WORK/venv"
# shellcheck disable=SC1091
source "$WORK/venv/bin/activate"

s=$(date +%s)
pip install "torch==2.13.0" -e ".[engine,test]" && golden demo
one=$?
echo "bench_fresh_machine: command 1 (pip install ... && golden demo): exit $one, $(( $(date +%s) - s )) s"

s=$(date +%s)
bash scripts/test.sh
two=$?
echo "bench_fresh_machine: command 2 (bash scripts/test.sh): exit $two, $(( $(date +%s) - s )) s, ended $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bench_fresh_machine: disk: $(du -sh "$WORK/venv" | cut -f1) venv, $(du -sh "$WORK/home/.cache/golden-replay" | cut -f1) in ~/.cache/golden-replay"
[ "$one" = 0 ] && [ "$two" = 0 ]
