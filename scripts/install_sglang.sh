#!/usr/bin/env bash
# Install SGLang 0.5.23's HTTP front end for `golden serve --frontend sglang` and the
# embedded-sglang-* launch profiles: sglang with --no-deps plus exactly the packages its HTTP
# server, TokenizerManager and DetokenizerManager import, on the CPU torch already installed.
#
# Where: a virtual environment of its own, ${GOLDEN_SGLANG_VENV:-~/.cache/golden-replay/sglang-venv},
# that sees the environment golden-replay was installed into ($PYTHON, default python3: a venv or
# the system's) and shadows only what SGLang needs newer (scripts/linked_venv.sh), so the CPU torch,
# aiohttp, pytest and golden-replay itself are the user's. SGLang 0.5.23 needs transformers 5.x, while the
# llama.cpp converter (scripts/build_llama_server.sh) pins transformers 4.57.6 in the system
# environment, so one environment for both would reinstall one of them on every run.
# torchvision is replaced by a stub (scripts/sglang_stubs/torchvision: SGLang imports it only for
# vision-model configs, and the PyPI wheel cannot load beside the CPU torch build).
#
# Safe to run again: a second run checks the stamp (the versions installed here, the user
# environment's prefix and a hash of its distributions: scripts/user_env.py) and exits in about a
# second; when the user environment changed, it installs again (pip reuses what is there).
# `--python` prints the venv's interpreter; `--packages` what pip installs beside SGLang; `--stamp` the stamp a complete install would record;
# `--link-only` makes the venv and its .pth and stops (no SGLang: tests of the mechanism use it). The tool itself never needs SGLang. Measured on the 2-core dev machine: docs/engine.md.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
PY="${PYTHON:-python3}"
VENV="${GOLDEN_SGLANG_VENV:-$HOME/.cache/golden-replay/sglang-venv}"
VPY="$VENV/bin/python"

source scripts/sglang_pins.sh  # SGLANG_PIN and exactly what the front end imports
source scripts/linked_venv.sh
PACKAGES=("${SGLANG_FRONTEND_PACKAGES[@]}")
SGLANG="$SGLANG_PIN"
STAMP="$VENV/.golden-sglang-installed"
NAME=install_sglang

if [ "${1:-}" = "--python" ]; then  # where the interpreter is (scripts/test.sh runs pytest on it)
    echo "$VPY"
    exit 0
fi
if [ "${1:-}" = "--packages" ]; then  # what pip installs beside SGLang, one a line (tests read it)
    printf '%s\n' "${PACKAGES[@]}"
    exit 0
fi
FINGERPRINT="$(user_env_fingerprint)" || {
    echo "install_sglang: $PY cannot run (set PYTHON to the interpreter golden-replay is installed in)" >&2; exit 2; }
WANT="$SGLANG ${PACKAGES[*]} stub-1 pth-1 $FINGERPRINT"
stamp_step "$@"

TORCH="$("$PY" -c 'import torch; print(torch.__version__)')" || {
    echo "install_sglang: torch is not installed in $PY (pip install torch==2.13.0 first)" >&2; exit 2; }
rm -f "$STAMP"  # a half-made venv must never look installed
make_linked_venv "$VENV"
SITE="$(venv_site "$VENV")"
link_only_step "$@"
CONSTRAINTS="$(torch_constraint "$TORCH")"  # pip must never replace the CPU torch
"$VPY" -m pip install --quiet --disable-pip-version-check -c "$CONSTRAINTS" "${PACKAGES[@]}"
"$VPY" -m pip install --quiet --disable-pip-version-check --no-deps "$SGLANG"
rm -rf "$SITE/torchvision"
cp -r scripts/sglang_stubs/torchvision "$SITE/torchvision"
# The check that matters: SGLang's HTTP server imports, with the user environment's torch.
"$VPY" - "$TORCH" <<'PY'
import sys, warnings
warnings.simplefilter("ignore")
import torch
import sglang.srt.entrypoints.http_server  # noqa: F401
from sglang.srt.managers import detokenizer_manager, tokenizer_manager  # noqa: F401
assert torch.__version__ == sys.argv[1], f"torch changed to {torch.__version__}"
PY
echo "$WANT" > "$STAMP"
echo "install_sglang: installed $SGLANG in $VENV ($(( $(date +%s) - START )) s)"
