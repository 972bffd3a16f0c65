#!/usr/bin/env bash
# What was run on the H200 machine (device tool) for docs/benchmarks.md and docs/engine-model.md.
# Expects zarr and rich wheels in .whl (see docs/benchmarks.md); packs its results into
# $OUT/h200-results.tar.gz.
set -u
RESULTS=${OUT:-/tmp}/h200-results.tar.gz
OUT=/tmp/h200-out
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" >> "$OUT/gpu.txt"
nproc >> "$OUT/gpu.txt"

echo "== CPU vs CUDA bits" >&2
timeout 300 python3 scripts/engine_cuda_check.py > "$OUT/cuda_check.json" 2> "$OUT/cuda_check.err"

echo "== engine speed" >&2
{
  for c in tiny small medium; do
    timeout 120 python3 scripts/bench_engine.py --config $c --device cuda --batch 9
  done
  timeout 120 python3 scripts/bench_engine.py --config tiny --device cpu --batch 9 --threads 1
} > "$OUT/bench_engine.txt" 2>&1

echo "== replay a golden recorded on the 2-core CPU machine against the engine on CUDA" >&2
for dev in cuda cpu; do
  port=$((30100 + RANDOM % 1000))
  python3 -m replay.engine --profile hicache --device $dev --port $port > "$OUT/engine_$dev.log" 2>&1 &
  pid=$!
  for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
  /usr/bin/time -v python3 -m cli replay goldens/hicache-branching.zarr --server "http://127.0.0.1:$port" \
      --report "$OUT/replay_$dev.json" -q > "$OUT/replay_$dev.txt" 2> "$OUT/replay_${dev}_time.txt"
  kill $pid; wait $pid
done
tar -czf "$RESULTS" -C /tmp h200-out
echo done >&2
