#!/usr/bin/env bash
# The SGLang releases whose own request class the client's /generate bodies are checked against
# (tests/e2e/sglang_wire/): each release's wheel, `pip download --no-deps` (no dependency, no
# install), unpacked as a plain `sglang/` folder in
# ${GOLDEN_SGLANG_RELEASES:-~/.cache/golden-replay/sglang-releases}/VERSION/. The tests import
# `sglang.srt.managers.io_struct` from such a folder on SGLang's venv Python (its torch, pydantic
# and zmq; scripts/install_sglang.sh), which is all that module needs.
#
# The releases are the boundaries of the top-k forms (replay/server/apis/sglang_wire.py): 0.5.14
# (no flat form), 0.5.17 and 0.5.21 (flat input only; b64 alone refused), 0.5.22 and 0.5.23
# (flat output). About 150 MB of downloads and 500 MB unpacked, the first time; then under a
# second (each folder has a stamp). `--dir` prints the cache folder; `--releases` the list.
set -euo pipefail
PY="${PYTHON:-python3}"
DIR="${GOLDEN_SGLANG_RELEASES:-$HOME/.cache/golden-replay/sglang-releases}"
RELEASES=(0.5.14 0.5.17 0.5.21 0.5.22 0.5.23)

case "${1:-}" in
    --dir) echo "$DIR"; exit 0 ;;
    --releases) echo "${RELEASES[*]}"; exit 0 ;;
esac

START=$(date +%s)
mkdir -p "$DIR"
for v in "${RELEASES[@]}"; do
    dest="$DIR/$v"
    [ -f "$dest/.unpacked" ] && continue
    rm -rf "$dest" "$dest.tmp"
    mkdir -p "$dest.tmp/wheel"
    "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        "sglang==$v" -d "$dest.tmp/wheel" 2> >(grep -v "is ignored: it is neither" >&2)
    wheel="$(ls "$dest.tmp"/wheel/sglang-"$v"-*.whl)"
    "$PY" -m zipfile -e "$wheel" "$dest.tmp/unzipped"
    mkdir -p "$dest"
    mv "$dest.tmp/unzipped/sglang" "$dest/sglang"
    rm -rf "$dest.tmp"
    echo "$v" > "$dest/.unpacked"
    echo "fetch_sglang_releases: sglang $v unpacked in $dest" >&2
done
echo "fetch_sglang_releases: ${RELEASES[*]} in $DIR ($(( $(date +%s) - START )) s)" >&2
