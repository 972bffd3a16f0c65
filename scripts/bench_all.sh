#!/usr/bin/env bash
# Every CPU benchmark behind docs/benchmarks.md, in one run (compare within a run: ratios).
# GPU figures come from scripts/h200_run.sh on the device machine.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "## $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
echo; echo "### parsing one answer"; python3 scripts/bench_parse.py
echo; echo "### whole client and diff throughput"; python3 scripts/bench_client.py --requests 32 1024
echo; echo "### golden size (top-k 0, 5, 20)"; python3 scripts/bench_golden_size.py --table
echo; echo "### golden size (real recording)"; python3 scripts/bench_golden_size.py --golden goldens/hicache-branching.zarr
echo; echo "### load"; python3 scripts/bench_load.py --conversations 250 1000 --concurrency 256
echo; echo "### engine speed (tiny, CPU, one thread)"
python3 scripts/bench_engine.py --config tiny --device cpu --batch 9 --threads 1
python3 scripts/bench_engine.py --config tiny --device cpu --batch 1 --threads 1
echo; echo "### hicache-branching: record on reference + replay on hicache (golden demo, real processes)"
start=$(date +%s.%N); golden demo --out /tmp/bench-demo -q; end=$(date +%s.%N)
python3 -c "print(f'golden demo wall: {$end - $start:.1f} s')"
