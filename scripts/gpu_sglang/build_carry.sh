#!/usr/bin/env bash
# Build the carry for real SGLang 0.5.17 on the lent H200 (docs/gpu.md): the wheels its image lacks
# or has in a version 0.5.17 refuses, sglang-kernel repacked (repack_kernel.py), the IPython stub,
# the tiny SGLang model folders (scripts/make_tiny_hf_models.py), as one tar split into chunks that
# each fit one device call, plus MANIFEST.sha256 (every chunk, the tar, every file in it) that
# install_on_device.sh verifies before it installs anything.
#
# usage: build_carry.sh [--variant triton|fa3] [--with-router] [--chunk-mib N] [--no-models] OUTDIR
#   --variant triton  sgl_kernel without FA3 (--attention-backend triton only; the default)
#   --variant fa3     with flash_ops.abi3.so, its sm80/sm86 cubins zeroed (fatbin_zero.py)
#   --with-router     also sglang-router (ROUTER_PIN in scripts/sglang_pins.sh; a 31 MB abi3
#                     wheel, its requirements already carried): the topologies of the two-GPU
#                     DP plan (docs/gpu.md, "Two GPUs"); GOLDEN_ROUTER_PYTHON=$(command -v python3)
#   --chunk-mib N     chunk size; default: what fits one call beside this checkout's working tree
#                     (64 MiB in all, less the tree, less a 3 MiB margin), at most 58 MiB
# OUTDIR receives chunk-00 .. chunk-NN and MANIFEST.sha256 (old ones there are removed). Inside a
# git checkout it must be ignored (.carry/ is), or every device call would send all the chunks.
#
# Why these wheels, these versions (found by check_imports.py: SGLang's server modules imported
# offline on the image's packages plus these, nothing else; the feasibility run agreed):
# - torch 2.11.0 is the image's: 0.5.17 is the newest SGLang pinning it (0.5.18 pins 2.13.0);
# - transformers 5.12.1 (0.5.17's pin; the image's 5.17.0 registers qwen3_asr, which 0.5.17
#   registers again: ValueError at import) with tokenizers 0.22.2 (5.12.1 wants <=0.23.0);
# - fastapi 0.135.0 (0.150+ imports opentelemetry), xgrammar 0.2.1 and openai 2.6.1 (0.5.17's
#   pins), soundfile 0.13.1 (its pin), apache-tvm-ffi 0.1.11 (its pin);
# - starlette 0.52.1, compressed-tensors 0.20.1: what the feasibility run carried;
# - pydantic and the rest: not in the image at all; versions are the newest released before the
#   image's newest known package (huggingface-hub 1.33.0, 2026-09-24), so what they need of the
#   image's own packages (typing-extensions, anyio, attrs ...) an image of that time has
#   (self_check.py checks that on the device); numcodecs 0.16.5 since zarr refuses 0.17.0;
# - pycparser: cffi's need, not in the image.
# - zarr, numcodecs, donfig, google-crc32c, msgspec, pybase64: golden-replay's own needs beyond the
#   image (pyproject.toml: aiohttp, numpy, typer, rich are there).
# Downloads are cached in ${GOLDEN_GPU_CARRY_CACHE:-~/.cache/golden-replay/gpu-carry}.
set -euo pipefail

WHEELS=(
    sglang==0.5.17 sglang-kernel==0.4.5 flashinfer-python==0.6.15.post1
    transformers==5.12.1 tokenizers==0.22.2
    pydantic==2.13.5 pydantic-core==2.46.5 annotated-types==0.8.0 typing-inspection==0.4.4
    fastapi==0.135.0 starlette==0.52.1 uvicorn==0.53.0 python-multipart==0.0.32 watchfiles==1.3.0
    xgrammar==0.2.1 apache-tvm-ffi==0.1.11 torch-memory-saver==0.0.10
    openai==2.6.1 jiter==0.17.0 distro==1.9.0 sniffio==1.3.1
    orjson==3.12.0 pybase64==1.5.0 pyzmq==27.2.0 msgspec==0.21.1 setproctitle==1.3.7
    compressed-tensors==0.20.1 loguru==0.7.3 partial-json-parser==0.2.1.1.post7 interegular==0.3.3
    gguf==0.19.0 dill==0.4.1
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.6.3
    soundfile==0.13.1 cffi==2.1.1 pycparser==3.0
    zarr==3.4.0 numcodecs==0.16.5 donfig==0.8.1.post1 google-crc32c==1.9.0
)
# manylinux tags up to 2_34 (sglang 0.5.17's own wheel; the image is Ubuntu 24.04, glibc 2.39).
PLATFORMS=(manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64
           manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64
           manylinux1_x86_64)
MODELS=(tiny-llama-sglang tiny-qwen3-next-sglang)
MAX_CHUNK_MIB=58
CALL_LIMIT=$((64 << 20))
MARGIN=$((3 << 20))

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${GOLDEN_GPU_CARRY_CACHE:-$HOME/.cache/golden-replay/gpu-carry}"
PY="${PYTHON:-python3}"
die() { echo "build_carry: $*" >&2; exit 2; }

VARIANT=triton CHUNK_MIB="" WITH_MODELS=1 WITH_ROUTER=0 OUTDIR=""
while [ $# -gt 0 ]; do
    case "$1" in
        --variant) VARIANT="${2:-}"; shift 2 ;;
        --chunk-mib) CHUNK_MIB="${2:-}"; shift 2 ;;
        --no-models) WITH_MODELS=0; shift ;;
        --with-router) WITH_ROUTER=1; shift ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [ -z "$OUTDIR" ] || die "one OUTDIR only (see --help)"; OUTDIR="$1"; shift ;;
    esac
done
[ -n "$OUTDIR" ] || die "OUTDIR missing (usage: build_carry.sh [--variant triton|fa3] OUTDIR)"
case "$VARIANT" in triton|fa3) ;; *) die "--variant must be triton or fa3, not '$VARIANT'" ;; esac
if [ "$WITH_ROUTER" = 1 ]; then
    source "$ROOT/scripts/sglang_pins.sh"  # ROUTER_PIN
    WHEELS+=("$ROUTER_PIN")
fi
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
if git -C "$OUTDIR" rev-parse --show-toplevel >/dev/null 2>&1 \
        && ! git -C "$OUTDIR" check-ignore -q "$OUTDIR"; then
    die "$OUTDIR is in a git checkout and not ignored: every device call would send it (use .carry/)"
fi

# Chunk size: what one device call can take beside the working tree that travels with it.
tree_bytes() {
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
        | xargs -0 -r du -cb 2>/dev/null | awk 'END {print $1 + 0}')
}
TREE=$(tree_bytes)
if [ -z "$CHUNK_MIB" ]; then
    FIT=$(( (CALL_LIMIT - TREE - MARGIN) >> 20 ))
    CHUNK_MIB=$(( FIT < MAX_CHUNK_MIB ? FIT : MAX_CHUNK_MIB ))
fi
[ "$CHUNK_MIB" -ge 8 ] 2>/dev/null || die "chunk size $CHUNK_MIB MiB too small (working tree $TREE bytes)"
CHUNK=$((CHUNK_MIB << 20))
echo "build_carry: variant $VARIANT$( [ "$WITH_ROUTER" = 1 ] && echo " + router"); working tree $((TREE >> 10)) KiB; chunks of $CHUNK_MIB MiB" >&2

# 1. The wheels, for the device's Python 3.12 (cp312 / abi3 / py3, manylinux x86_64).
mkdir -p "$CACHE/wheels"
plat=(); for p in "${PLATFORMS[@]}"; do plat+=(--platform "$p"); done
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp "${plat[@]}" -d "$CACHE/wheels" "${WHEELS[@]}" \
    2> >(grep -v "is ignored: it is neither" >&2) || die "pip download failed"
mapfile -t FILES < <("$PY" "$HERE/pick_wheels.py" "$CACHE/wheels" "${WHEELS[@]}") \
    || die "a pinned wheel is missing from $CACHE/wheels"
[ "${#FILES[@]}" -eq "${#WHEELS[@]}" ] || die "pick_wheels.py found ${#FILES[@]} of ${#WHEELS[@]} wheels"

# 2. sgl_kernel repacked (cached per variant, keyed by the scripts that make it).
KEY=$(cat "$HERE/repack_kernel.py" "$HERE/fatbin_zero.py" | sha256sum | cut -c1-16)
REPACKED="$CACHE/repacked/$VARIANT-$KEY"
for f in "${FILES[@]}"; do
    case "$(basename "$f")" in sglang_kernel-*) KERNEL="$f" ;; esac
done
if [ ! -f "$REPACKED/$(basename "$KERNEL")" ]; then
    echo "build_carry: repacking $(basename "$KERNEL") ($VARIANT; fa3 takes ~3 min)" >&2
    "$PY" "$HERE/repack_kernel.py" "$KERNEL" "$VARIANT" "$REPACKED" >/dev/null
fi

# 3. Stage: wheels/, stubs/IPython, models/, CARRY (what this is).
STAGE="$(mktemp -d "$CACHE/stage-XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/wheels" "$STAGE/stubs" "$STAGE/models"
for f in "${FILES[@]}"; do
    if [ "$f" = "$KERNEL" ]; then
        cp "$REPACKED/$(basename "$f")" "$STAGE/wheels/"
    else
        ln "$f" "$STAGE/wheels/" 2>/dev/null || cp "$f" "$STAGE/wheels/"
    fi
done
cp -r "$HERE/stubs/IPython" "$STAGE/stubs/IPython"
find "$STAGE/stubs" -name __pycache__ -prune -exec rm -rf {} +
if [ "$WITH_MODELS" = 1 ]; then
    while read -r name path; do
        cp -r "$path" "$STAGE/models/$name"
    done < <("$PY" "$ROOT/scripts/make_tiny_hf_models.py" "${MODELS[@]}")
fi
{
    echo "golden-replay GPU carry: SGLang 0.5.17 for the H200 image (docs/gpu.md)"
    echo "variant $VARIANT$( [ "$WITH_ROUTER" = 1 ] && echo " with router")"
    echo "wheels ${WHEELS[*]}"
    echo "models $( [ "$WITH_MODELS" = 1 ] && echo "${MODELS[*]}" || echo none)"
} > "$STAGE/CARRY"

# 4. One tar (deterministic: sorted, no owners, fixed times), split; the manifest.
rm -f "$OUTDIR"/chunk-[0-9]* "$OUTDIR/MANIFEST.sha256"
TAR="$CACHE/carry-$VARIANT.tar"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$TAR" -C "$STAGE" .
split -b "$CHUNK" -d -a 2 "$TAR" "$OUTDIR/chunk-"
(
    cd "$OUTDIR" && sha256sum chunk-[0-9]*
    sha256sum "$TAR" | sed "s|  .*|  carry.tar|"
    cd "$STAGE" && find . -type f | LC_ALL=C sort | sed 's|^\./||' | xargs sha256sum | sed 's|  |  files/|'
) > "$OUTDIR/MANIFEST.sha256"
rm -f "$TAR"

N=$(ls "$OUTDIR"/chunk-[0-9]* | wc -l)
TOTAL=$(cat "$OUTDIR"/chunk-[0-9]* | wc -c)
echo "build_carry: $N chunks, $((TOTAL >> 20)) MiB ($TOTAL bytes) in $OUTDIR (variant $VARIANT," \
     "${#WHEELS[@]} wheels$( [ "$WITH_MODELS" = 1 ] && echo ", models ${MODELS[*]}"))" >&2
ls -l "$OUTDIR" | awk 'NR > 1 {printf "  %-16s %10d\n", $NF, $5}' >&2
