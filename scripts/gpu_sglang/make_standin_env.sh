#!/usr/bin/env bash
# A stand-in for the H200 image's Python, here on a CPU machine, for check_imports.py: a Python 3.12
# venv holding only distributions of the image's list (device_packages.txt), at the image's
# versions where KINDS.md gives them (torch 2.11.0+cu130 from PyPI, the device's build, with its
# CUDA 13 libraries: it imports without a GPU; transformers 5.17.0 and tokenizers 0.23.2, which the
# carry shadows). Other versions: what `pip install torch==2.11.0` resolves for torch's own needs,
# and for the rest the newest released before 2026-09-25 (the image's newest known package,
# huggingface-hub 1.33.0, is of 2026-09-24).
#
# Every package goes in with --no-deps, so nothing the image lacks slips in; the script ends by
# checking the venv against device_packages.txt. About 4.5 GB (torch and its CUDA libraries),
# 5-10 minutes the first time.
# usage: make_standin_env.sh [VENV]   (default ${GOLDEN_GPU_STANDIN_VENV:-~/.cache/golden-replay/gpu-standin-venv});
#        prints the venv's python
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${1:-${GOLDEN_GPU_STANDIN_VENV:-$HOME/.cache/golden-replay/gpu-standin-venv}}"

IMAGE=(  # versions read on the device (KINDS.md)
    torch==2.11.0 triton==3.6.0 numpy==2.5.2 transformers==5.17.0 tokenizers==0.23.2
    huggingface-hub==1.33.0 safetensors==0.8.0 sentencepiece==0.2.2 tiktoken==0.14.0
    torchvision==0.26.0 torchaudio==2.11.0
)
TORCH_NEEDS=(  # what pip resolved for torch==2.11.0 (all on the image's list)
    cuda-bindings==13.5.0 cuda-pathfinder==1.9.1 cuda-toolkit==13.0.2 filelock==4.3.1
    fsspec==2026.9.0 jinja2==3.1.6 markupsafe==3.0.4 mpmath==1.3.0 networkx==3.7
    nvidia-cublas==13.1.0.3 nvidia-cuda-cupti==13.0.85 nvidia-cuda-nvrtc==13.0.88
    nvidia-cuda-runtime==13.0.96 nvidia-cudnn-cu13==9.19.0.56 nvidia-cufft==12.0.0.61
    nvidia-cufile==1.15.1.6 nvidia-curand==10.4.0.35 nvidia-cusolver==12.0.4.66
    nvidia-cusparse==12.6.3.3 nvidia-cusparselt-cu13==0.8.0 nvidia-nccl-cu13==2.28.9
    nvidia-nvjitlink==13.0.88 nvidia-nvshmem-cu13==3.4.5 nvidia-nvtx==13.0.85
    setuptools==81.0.0 sympy==1.14.0 typing-extensions==4.16.0
)
ESTIMATED=(  # on the image's list, version not read there: newest before 2026-09-25
    packaging==26.3 requests==2.34.2 urllib3==2.8.0 idna==3.20 certifi==2026.7.22
    charset-normalizer==3.5.1 aiohttp==3.14.3 aiohappyeyeballs==2.7.1 aiosignal==1.4.0
    attrs==26.1.0 frozenlist==1.8.0 multidict==6.9.1 propcache==0.5.4 yarl==1.25.1
    anyio==4.15.1 h11==0.16.0 httpx==0.28.1 httpcore==1.0.9 hf-xet==1.6.0 pyyaml==6.0.3
    regex==2026.9.10 tqdm==4.70.1 typer==0.27.2 click==8.5.0 rich==15.0.0 markdown-it-py==4.2.0
    mdurl==0.1.2 pygments==2.21.0 shellingham==1.5.4 annotated-doc==0.0.5 psutil==7.2.2
    pillow==12.3.0 einops==0.8.2 scipy==1.18.1 uvloop==0.22.1 prometheus-client==0.26.0
    msgpack==1.2.2 cloudpickle==3.1.2 nvidia-ml-py==13.610.43 ninja==1.13.2 xxhash==4.0.1
)

PY312=""  # the first that runs: $PYTHON312, python3.12 on PATH, pyenv's
for p in ${PYTHON312:-} python3.12 "$HOME"/.pyenv/versions/3.12.*/bin/python3.12; do
    if "$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then PY312="$p"; break; fi
done
[ -n "$PY312" ] || { echo "make_standin_env: no Python 3.12 found (set PYTHON312)" >&2; exit 2; }
[ -x "$VENV/bin/python" ] || "$PY312" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: \
    "${IMAGE[@]}" "${TORCH_NEEDS[@]}" "${ESTIMATED[@]}" 2> >(grep -v "is ignored: it is neither" >&2)

# Nothing but the image's distributions (pip itself is on the list too).
"$VENV/bin/python" - "$HERE/device_packages.txt" <<'EOF'
import importlib.metadata as md, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
device = {norm(l.split()[0]) for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")}
extra = sorted({norm(d.metadata["Name"]) for d in md.distributions()} - device)
if extra:
    sys.exit(f"make_standin_env: the venv holds distributions the device lacks: {extra}")
EOF
echo "$VENV/bin/python"
