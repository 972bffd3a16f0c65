#!/usr/bin/env bash
# Install SGLang's router (`sglang-router` 0.3.2 from PyPI: a Rust load balancer with cache-aware
# routing) for the topology launch profiles (replay/server/topologies/, docs/topologies.md) and
# tests/e2e/router/. Its own venv, ${GOLDEN_ROUTER_VENV:-~/.cache/golden-replay/router-venv}
# (146 MB); the tool finds it there or through GOLDEN_ROUTER_PYTHON.
# Safe to run again: a second run checks the stamp and exits. `--python` prints the interpreter.
set -euo pipefail
START=$(date +%s)
PY="${PYTHON:-python3}"
VENV="${GOLDEN_ROUTER_VENV:-$HOME/.cache/golden-replay/router-venv}"
VPY="$VENV/bin/python"
source "$(dirname "${BASH_SOURCE[0]}")/sglang_pins.sh"  # ROUTER_PIN
WANT="$ROUTER_PIN"
STAMP="$VENV/.golden-router-installed"

if [ "${1:-}" = "--python" ]; then
    echo "$VPY"
    exit 0
fi
if [ -x "$VPY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
    echo "install_router: already installed in $VENV ($(( $(date +%s) - START )) s)"
    exit 0
fi
"$PY" -m venv "$VENV"
"$VPY" -m pip install --quiet --disable-pip-version-check "$WANT"
"$VPY" -c "import sglang_router.launch_router, sglang_router.sglang_router_rs"
echo "$WANT" > "$STAMP"
echo "install_router: installed $WANT in $VENV ($(( $(date +%s) - START )) s)"
