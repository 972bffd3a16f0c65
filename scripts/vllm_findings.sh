#!/usr/bin/env bash
# The vLLM findings of docs/findings.md (vLLM section), measured on the tiny models with the
# built-in vllm-* profiles; report files into docs/findings/vllm/. One server at a time.
# Needs `bash scripts/install_vllm.sh`.
# `bash scripts/vllm_findings.sh [chunk] [concurrency] [f32] [nemotron]` (default: all four); each server start takes 1-3 minutes on the loaded 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/findings/vllm
LOGS="${GOLDEN_LOG_DIR:-golden-logs}"
mkdir -p "$OUT"
LLAMA="$(python3 scripts/make_tiny_hf_models.py tiny-llama | cut -d' ' -f2)"
step() { echo "== $*" >&2; }
STEPS="${*:-chunk concurrency f32 nemotron}"
wants() { case " $STEPS " in *" $1 "*) return 0;; *) return 1;; esac; }

# 1. f32: a prompt position's logprob depends on the prefill chunk it is computed in (no cache).
if wants chunk; then
    step "chunk length, float32 and bfloat16; float32 with the CPU attention's KV split off"
    python3 scripts/vllm_findings.py chunk-length --dtype float32 --log-dir "$LOGS"
    python3 scripts/vllm_findings.py chunk-length --dtype bfloat16 --log-dir "$LOGS"
    VLLM_CPU_ATTN_SPLIT_KV=0 python3 scripts/vllm_findings.py chunk-length --dtype float32 \
        --tag split-kv-off --log-dir "$LOGS"
fi

# 2. The reference at concurrency 16 with vLLM's default prefill budget (2048) is not repeatable.
if wants concurrency; then
step "reference determinism with the default budget"
for dtype in float32 bfloat16; do
    golden record --launch vllm-reference --model "$LLAMA" --log-dir "$LOGS" \
        --server-arg=--dtype=$dtype --server-arg=--max-num-batched-tokens=2048 \
        --scenario "$OUT/concurrency.toml" --out "$LOGS/concurrency-$dtype.zarr" --force \
        --concurrency 16 --check-determinism 2 --quiet > "$OUT/concurrency-2048-$dtype.txt" 2>&1 \
        && echo "exit 0" >> "$OUT/concurrency-2048-$dtype.txt" \
        || echo "exit $?" >> "$OUT/concurrency-2048-$dtype.txt"
    cat "$OUT/concurrency-2048-$dtype.txt" >&2
done
fi

# 3. f32 replay with hits fails; the smallest repro by `golden minimize`.
if wants nemotron; then
    # 4. NemotronH (Mamba-2 hybrid) with prefix caching: the CPU server crashes on the first
    #    long prompt (the reference, caching off, records fine).
    step "NemotronH with prefix caching"
    NEMO="$(python3 scripts/make_tiny_hf_models.py tiny-nemotron-h | cut -d' ' -f2)"
    golden record --launch vllm-reference --model "$NEMO" --log-dir "$LOGS" \
        --scenario "$OUT/conversations.toml" --out "$LOGS/nemotron-h.zarr" --force --quiet
    golden replay "$LOGS/nemotron-h.zarr" --launch vllm-prefix-cache --model "$NEMO" \
        --log-dir "$LOGS" --repeat 2 --report "$OUT/nemotron-h-prefix-cache-replay.json" --quiet || true
fi

wants f32 || exit 0
step "float32 replay and its minimal repro"
golden record --launch vllm-reference --model "$LLAMA" --log-dir "$LOGS" --server-arg=--dtype=float32 \
    --scenario "$OUT/conversations.toml" --out "$LOGS/llama-f32.zarr" --force \
    --concurrency 16 --check-determinism 2 --quiet
golden replay "$LOGS/llama-f32.zarr" --launch vllm-prefix-cache --model "$LLAMA" --log-dir "$LOGS" \
    --server-arg=--dtype=float32 --repeat 2 --report "$OUT/llama-f32-replay.json" --quiet || true
golden minimize "$LOGS/llama-f32.zarr" --launch vllm-prefix-cache --model "$LLAMA" --log-dir "$LOGS" \
    --server-arg=--dtype=float32 --report "$OUT/llama-f32-replay.json" --budget 300 \
    --out "$OUT/llama-f32-repro" --force --quiet || true
