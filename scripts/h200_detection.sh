#!/usr/bin/env bash
# The full-size detection matrix on the H200 machine's 16 CPU cores, runs in parallel:
# every fault on hicache-branching, and 20 fault-free repeats of every committed preset golden
# (split into parallel runs of 5 or 10 repeats). Packs the tables into $OUT/detection.tar.gz.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
D=/tmp/detection; mkdir -p $D
run() { python3 scripts/detection_matrix.py "$@"; }
run faults > $D/faults.md 2> $D/faults.err &
for i in 1 2 3 4; do run repeats --golden goldens/hicache-branching.zarr --repeats 5 > $D/hb$i.md 2>&1 & done
for i in 1 2 3 4; do run repeats --golden goldens/wide.zarr --repeats 5 > $D/wide$i.md 2>&1 & done
for i in 1 2; do run repeats --golden goldens/deep.zarr --repeats 10 > $D/deep$i.md 2>&1 & done
run repeats --golden goldens/single.zarr --repeats 20 > $D/single.md 2>&1 &
wait
tar -czf "${OUT:-/tmp}/detection.tar.gz" -C /tmp detection
