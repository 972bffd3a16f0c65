#!/bin/sh
# Written by `golden minimize` (how it was found: minimize.json beside this file).
# Reruns the minimized replay: 4 request(s) that fail with logprob_drift.
# Usage: repro.sh [SERVER_URL] [more `golden replay` options, e.g. --report r.json]
# Without SERVER_URL: --launch vllm-prefix-cache --model /root/.cache/golden-replay/hf-models/tiny-llama --server-arg=--dtype=float32. Exits as `golden replay` does (0 pass, 1 fail, 2 error).
# Set GOLDEN to run another build of the tool, e.g. GOLDEN="python3 -m cli".
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
case "${1:-}" in
    ""|-*) set -- --launch vllm-prefix-cache --model /root/.cache/golden-replay/hf-models/tiny-llama --server-arg=--dtype=float32 "$@" ;;
    *) url=$1; shift; set -- --server "$url" "$@" ;;
esac
exec ${GOLDEN:-golden} replay "$here/golden.zarr" --api auto --policy exact --expect-cache auto --schedule lockstep --concurrency 1 --repeat 1 "$@"
