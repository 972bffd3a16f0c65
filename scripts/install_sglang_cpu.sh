#!/usr/bin/env bash
# Install SGLang 0.5.23's REAL server (HTTP server, Scheduler, ModelRunner, radix cache, HiCache)
# for a CPU, for the sglang-cpu-* launch profiles and tests/e2e/sglang_cpu/ (docs/sglang-cpu.md):
# sglang with --no-deps plus its runtime packages, on the CPU torch already installed (2.13.0+cpu,
# pinned as a constraint: an unpinned torch would pull the multi-GB CUDA build SGLang pins), and
# sgl-kernel's CPU extension built from source with torch.utils.cpp_extension: only the kvcache
# ops a Llama reaches (scripts/sglang_cpu/build_kernel.py), from the vendored source
# (vendor/, Apache-2.0; no wheel or sdist exists) unless told otherwise; and the packages of the
# L3 storage backends that run on a CPU (Mooncake, NIXL, SeaweedFS: scripts/sglang_pins.sh).
#
# Where: ${GOLDEN_SGLANG_CPU_VENV:-~/.cache/golden-replay/sglang-cpu-venv}, a venv of its own that
# sees the environment golden-replay was installed into ($PYTHON, default python3: a venv or the
# system's; scripts/linked_venv.sh), so the CPU torch and `python -m replay.sglang_cpu` are the
# user's; its stamp holds a hash of that environment, so a changed one installs again (pip reuses
# what is there, the kernel comes from its cache); the built kernel is cached in
# ${GOLDEN_SGL_KERNEL_CACHE:-~/.cache/golden-replay/sgl-kernel-cpu}, keyed by its sources, flags,
# torch and Python, so a second venv (or a second run) builds nothing.
# Your own SGLang: GOLDEN_SGLANG_SRC=/path/to/sglang (a checkout: installs python/ editable and
# builds the kernel from python/sglang/kernels/aot); GOLDEN_SGL_KERNEL_SRC=DIR overrides only the
# kernel source (the folder holding csrc/cpu and include); GOLDEN_SGL_KERNEL_TARBALL=FILE another
# tarball of the vendored layout.
#
# Safe to run again: a second run compares its stamp and exits at once. `--python` prints the
# venv's interpreter; `--packages` what pip installs beside SGLang; `--stamp` the stamp a complete install would record; `--link-only` makes the
# venv and its .pth and stops (tests of the mechanism use it). The tool itself never needs any of
# this. Needs gcc, libnuma-dev and libibverbs1 (Mooncake's store links it).
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
PY="${PYTHON:-python3}"
VENV="${GOLDEN_SGLANG_CPU_VENV:-$HOME/.cache/golden-replay/sglang-cpu-venv}"
VPY="$VENV/bin/python"
KERNEL_CACHE="${GOLDEN_SGL_KERNEL_CACHE:-$HOME/.cache/golden-replay/sgl-kernel-cpu}"
TARBALL="${GOLDEN_SGL_KERNEL_TARBALL:-$(pwd)/vendor/sgl-kernel-cpu-src-44806dc50.tar.gz}"
TARBALL_PREFIX="python/sglang/kernels/aot"

# The front end's packages (scripts/sglang_pins.sh), plus ninja for the kernel build and what
# the scheduler side imports (metrics, hashing, grammar backends).
source scripts/sglang_pins.sh
PACKAGES=(
    "${SGLANG_FRONTEND_PACKAGES[@]}" "ninja" "prometheus-client" "xxhash" "interegular"
    "llguidance>=1.7.6,<2"
)
if [ -n "${GOLDEN_SGLANG_SRC:-}" ]; then
    SGLANG=(-e "$GOLDEN_SGLANG_SRC/python")
    KERNEL_SRC="${GOLDEN_SGL_KERNEL_SRC:-$GOLDEN_SGLANG_SRC/python/sglang/kernels/aot}"
else
    SGLANG=("$SGLANG_PIN")
    KERNEL_SRC="${GOLDEN_SGL_KERNEL_SRC:-}"
fi
STAMP="$VENV/.golden-sglang-cpu-installed"
NAME=install_sglang_cpu
source scripts/linked_venv.sh
if [ "${1:-}" = "--python" ]; then  # where the interpreter is
    echo "$VPY"
    exit 0
fi
if [ "${1:-}" = "--packages" ]; then  # what pip installs beside SGLang, one a line (tests read it)
    printf '%s\n' "${PACKAGES[@]}"
    exit 0
fi
FINGERPRINT="$(user_env_fingerprint)" || {
    echo "install_sglang_cpu: $PY cannot run (set PYTHON to the interpreter golden-replay is installed in)" >&2; exit 2; }

TORCH="$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null)" || {
    echo "install_sglang_cpu: torch is not installed in $PY (pip install torch==2.13.0 first)" >&2; exit 2; }
# What the stamp covers: every input of the environment, the kernel's sources included.
KERNEL_ID="${KERNEL_SRC:-$(sha256sum "$TARBALL" | cut -c1-16)}"
WANT="${SGLANG[*]} ${PACKAGES[*]} $MOONCAKE_PIN ${NIXL_PINS[*]} ${SEAWEEDFS_PINS[*]} torch-$TORCH kernel-$KERNEL_ID $(find scripts/sglang_cpu -maxdepth 1 -type f | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum | cut -c1-16) stub-1 pth-1 $FINGERPRINT"
stamp_step "$@"

rm -f "$STAMP"  # a half-made venv must never look installed
make_linked_venv "$VENV"
link_only_step "$@"
CONSTRAINTS="$(torch_constraint "$TORCH")"  # pip must never replace the CPU torch
"$VPY" -m pip install --quiet --disable-pip-version-check -c "$CONSTRAINTS" "${PACKAGES[@]}"
"$VPY" -m pip install --quiet --disable-pip-version-check --no-deps "${SGLANG[@]}"
# Mooncake (scripts/sglang_pins.sh): the KV transfer of the pd-* profiles and the L3 mooncake
# backend's store and master; the other L3 backends: SeaweedFS's server and boto3, NIXL's POSIX
# plugin.
"$VPY" -m pip install --quiet --disable-pip-version-check -c "$CONSTRAINTS" "$MOONCAKE_PIN" \
    "${SEAWEEDFS_PINS[@]}"
"$VPY" -m pip install --quiet --disable-pip-version-check --no-deps "${NIXL_PINS[@]}"
SITE="$(venv_site "$VENV")"
rm -rf "$SITE/torchvision"
cp -r scripts/sglang_stubs/torchvision "$SITE/torchvision"

# The kernel: sources from the tarball unless a directory was given; built once per inputs.
if [ -z "$KERNEL_SRC" ]; then
    [ -f "$TARBALL" ] || { echo "install_sglang_cpu: no kernel source: $TARBALL is missing (set GOLDEN_SGL_KERNEL_SRC)" >&2; exit 2; }
    UNPACKED="$KERNEL_CACHE/src-$KERNEL_ID"
    if [ ! -d "$UNPACKED/$TARBALL_PREFIX" ]; then
        rm -rf "$UNPACKED.partial" && mkdir -p "$UNPACKED.partial"
        tar xzf "$TARBALL" -C "$UNPACKED.partial"
        rm -rf "$UNPACKED" && mv "$UNPACKED.partial" "$UNPACKED"
    fi
    KERNEL_SRC="$UNPACKED/$TARBALL_PREFIX"
fi
SO="$(nice "$VPY" scripts/sglang_cpu/build_kernel.py "$KERNEL_SRC" "$KERNEL_CACHE" | tail -1)"
# sgl_kernel's Python package from the same source, with the built library beside it (its loader
# falls back to sgl_kernel/common_ops.* when no GPU-architecture folder matches).
rm -rf "$SITE/sgl_kernel"
cp -r "$KERNEL_SRC/python/sgl_kernel" "$SITE/sgl_kernel"
cp "$SO" "$SITE/sgl_kernel/common_ops.so"

# The check that matters: the scheduler side imports on the CPU torch, the kernel ops registered.
SGLANG_USE_CPU_ENGINE=1 "$VPY" - "$TORCH" <<'PY'
import sys, warnings
warnings.simplefilter("ignore")
import torch
import sgl_kernel  # noqa: F401
import sglang.srt.entrypoints.http_server  # noqa: F401
from sglang.srt.managers import scheduler  # noqa: F401
from sglang.srt.mem_cache.pool_host import mha  # noqa: F401
import replay.sglang_cpu.patches  # noqa: F401  (the launcher the profiles run: golden-replay itself)
from mooncake.engine import TransferEngine  # noqa: F401  (mooncake_tcp; needs libibverbs1)
assert torch.__version__ == sys.argv[1], f"torch changed to {torch.__version__}"
for op in ("store_cache_cpu", "copy_all_layer_kv_cache_cpu"):
    getattr(torch.ops.sgl_kernel, op)
sys.path.insert(0, "scripts/sglang_cpu")
import build_kernel  # noqa: E402
from replay.sglang_cpu.hybrid import GDN_OPS  # noqa: E402
if build_kernel.has_avx512(build_kernel.machine_cpuinfo()):  # the hybrid's ops (Qwen3-Next)
    for op in GDN_OPS:
        getattr(torch.ops.sgl_kernel, op)
from mooncake.store import MooncakeDistributedStore  # noqa: F401,E402  (needs libibverbs1)
from nixl._api import nixl_agent  # noqa: F401,E402
import boto3  # noqa: F401,E402
PY
for service in mooncake_master weed; do
    [ -x "$VENV/bin/$service" ] || { echo "install_sglang_cpu: $service is missing" >&2; exit 1; }
done
echo "$WANT" > "$STAMP"
echo "install_sglang_cpu: installed ${SGLANG[*]} in $VENV ($(du -sh "$VENV" | cut -f1), $(( $(date +%s) - START )) s)"
