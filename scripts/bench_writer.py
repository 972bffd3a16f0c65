"""Peak memory of writing a golden, without a server (issue 36): N synthetic requests of 256
output positions with top-5 (8 a group: 4 branches x 2 turns), written by the streaming
`GoldenWriter` (`stream`) or held whole and written by `write_golden` (`whole`). One mode and
size per process, so ru_maxrss is that write's peak. docs/benchmarks.md has the numbers.

Usage: PYTHONPATH=. python3 scripts/bench_writer.py stream|whole N
"""
import resource
import sys
import tempfile
import time
from pathlib import Path
import numpy as np
from replay.golden.model import Golden, RecordedRequest
from replay.golden.store import write_golden
from replay.golden.stream import GoldenWriter
mode, N = sys.argv[1], int(sys.argv[2]); P, k = 256, 5
rng = np.random.default_rng(0)
groups = N // 8
prefixes = [np.arange(64, dtype=np.int32) for _ in range(groups)]
def req(i):
    turn = i // (N // 2); j = i % (N // 2); g, b = j // 4, j % 4
    ids = rng.integers(0, 4096, P).astype(np.int32)
    lp = -rng.random(P).astype(np.float32).astype(np.float64)
    tids = rng.integers(0, 4096, (P, k)).astype(np.int32); tids[:, 0] = ids
    tlp = -rng.random((P, k)).astype(np.float32).astype(np.float64); tlp[:, 0] = lp
    return RecordedRequest(id=f"g{g}/b{b}/t{turn}", group=g, branch=b, turn=turn,
        parent=-1 if turn == 0 else j, new_tokens=np.arange(16, dtype=np.int32),
        max_new_tokens=P, output_ids=ids, logprobs=lp, top_ids=tids, top_logprobs=tlp,
        cached_tokens=0, cached_details={}, finish_reason="length")
d = Path(tempfile.mkdtemp()); t = time.process_time()
if mode == "stream":
    w = GoldenWriter(d / "g.zarr", prefixes, k)
    for i in range(N):
        w.add(i, req(i))
    w.finish(N, {"name": "x"}, {}, {})
else:
    write_golden(Golden({"name": "x"}, prefixes, [req(i) for i in range(N)], {}, {}), d / "g.zarr")
print(mode, N, "peak MiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
      "CPU s", round(time.process_time() - t, 1), flush=True)
