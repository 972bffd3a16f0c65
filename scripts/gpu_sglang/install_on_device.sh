#!/usr/bin/env bash
# The device side of the GPU carry (docs/gpu.md): verify the chunks that build_carry.sh made and
# the device calls copied to CARRY_DIR, reassemble them, check every file, install the wheels into
# SITE, add the IPython stub, put the tiny models in MODELS_DIR, then run self_check.py (versions,
# the wheels' requirements against the image, SGLang's server modules imported).
#
# usage: install_on_device.sh [CARRY_DIR] [SITE] [MODELS_DIR]   (/tmp/carry /tmp/site /tmp/models)
#   env: PYTHON (python3), CARRY_SKIP_IMPORTS=1 (skip the ~30 s module imports of the self-check)
# Prints `carry: ok ...` last, or `carry: FAILED: <what>` with exit status 1. Then:
#   export PYTHONPATH=SITE:$PWD   and   python3 -m sglang.launch_server --model-path MODELS_DIR/...
# Everything is checked before anything is installed: a missing or damaged chunk is named, and
# SITE is replaced only once the files are verified.
set -uo pipefail
CARRY="${1:-/tmp/carry}"
SITE="${2:-/tmp/site}"
MODELS="${3:-/tmp/models}"
PY="${PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fail() { echo "carry: FAILED: $*"; exit 1; }

cd "$CARRY" 2>/dev/null || fail "no folder $CARRY (copy the chunks and MANIFEST.sha256 there)"
[ -f MANIFEST.sha256 ] || fail "$CARRY/MANIFEST.sha256 missing (it travels with the chunks)"
mapfile -t CHUNKS < <(grep -oE '  chunk-[0-9]+$' MANIFEST.sha256 | sed 's/^  //')
[ "${#CHUNKS[@]}" -gt 0 ] || fail "MANIFEST.sha256 lists no chunk"
missing=()
for c in "${CHUNKS[@]}"; do [ -f "$c" ] || missing+=("$c"); done
[ "${#missing[@]}" -eq 0 ] || fail "${#missing[@]} of ${#CHUNKS[@]} chunks missing: ${missing[*]} (have: $(ls chunk-* 2>/dev/null | tr '\n' ' '))"
bad="$(grep -E '  chunk-[0-9]+$' MANIFEST.sha256 | sha256sum -c 2>/dev/null | grep -v ': OK$')"
[ -z "$bad" ] || fail "chunk checksum: $(echo "$bad" | tr '\n' ' ')(copy those again)"
echo "carry: ${#CHUNKS[@]} chunks verified"

cat "${CHUNKS[@]}" > carry.tar || fail "cannot write $CARRY/carry.tar (disk full?)"
grep -E '  carry\.tar$' MANIFEST.sha256 | sha256sum -c --status || fail "carry.tar checksum after joining the chunks"
rm -rf files && mkdir files && tar -xf carry.tar -C files || fail "tar -xf carry.tar"
rm -f carry.tar
bad="$(grep -E '  files/' MANIFEST.sha256 | sha256sum -c 2>/dev/null | grep -v ': OK$')"
[ -z "$bad" ] || fail "file checksum: $(echo "$bad" | head -3 | tr '\n' ' ')"
echo "carry: $(grep -c '  files/' MANIFEST.sha256) files verified ($(sed -n 2p files/CARRY))"

# The wheels want CPython 3.12 and glibc >= 2.34 (sglang 0.5.17's own wheel is manylinux_2_34).
"$PY" - <<'EOF' || fail "this Python/glibc cannot take the wheels (need CPython 3.12, glibc >= 2.34)"
import platform, sys
libc = tuple(int(x) for x in platform.libc_ver()[1].split(".")[:2])
sys.exit(0 if sys.version_info[:2] == (3, 12) and libc >= (2, 34) else 1)
EOF

rm -rf "$SITE.new"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --target "$SITE.new" files/wheels/*.whl > pip.log 2>&1 \
    || fail "pip install: $(grep -iE 'error|exception' pip.log | head -3 | tr '\n' ' ')(all of it: $CARRY/pip.log)"
cp -r files/stubs/IPython "$SITE.new/IPython" || fail "copying the IPython stub"
rm -rf "$SITE" && mv "$SITE.new" "$SITE" || fail "moving $SITE.new to $SITE"
models=""
if [ -n "$(ls files/models 2>/dev/null)" ]; then
    mkdir -p "$MODELS" || fail "mkdir $MODELS"
    for m in files/models/*; do
        rm -rf "$MODELS/$(basename "$m")" && cp -r "$m" "$MODELS/" || fail "copying $m to $MODELS"
        models+=" $MODELS/$(basename "$m")"
    done
fi
echo "carry: $(ls files/wheels | wc -l) wheels installed in $SITE; models:${models:- none}"

checks=("$SITE")
[ "${CARRY_SKIP_IMPORTS:-0}" = 1 ] && checks+=(--no-imports)
PYTHONPATH="$SITE" "$PY" "$HERE/self_check.py" "${checks[@]}" > self_check.log 2>&1
status=$?
grep -vE '^  import .*: ok' self_check.log | grep -v '^self-check:' | head -40
[ "$status" -eq 0 ] || fail "$(grep '^self-check:' self_check.log || tail -1 self_check.log) (all of it: $CARRY/self_check.log)"
echo "carry: ok ($(sed -n 2p files/CARRY); $(grep '^versions:' self_check.log | cut -d, -f1-3 | cut -d' ' -f2-); site $SITE; models:${models:- none})"
