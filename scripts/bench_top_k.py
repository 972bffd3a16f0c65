"""The top-k tie rule on a replay whose every position differs: one position at a time (the rule
as `top_k_equal` states it, what `diff_outputs` ran before) beside all at once
(`top_k_rows_equal`, what it runs now), on the same rows in one process.

The rows: every output position of a committed golden (default goldens/hicache-branching.zarr),
against the same top-k with each value rounded to bfloat16, as the host-bf16 fault does to KV
read back from the host tier (its logprobs then differ at nearly every later position). Both
forms are checked to give the same answers before anything is timed.

Usage: python3 scripts/bench_top_k.py [GOLDEN] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from replay.golden.store import read_golden  # noqa: E402
from replay.judge.top_k import top_k_equal, top_k_rows_equal  # noqa: E402


def bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), widened back."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("golden", nargs="?", default=str(REPO / "goldens" / "hicache-branching.zarr"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    nodes = read_golden(args.golden).nodes
    gi = np.concatenate([n.top_ids for n in nodes])
    gv = np.concatenate([n.top_logprobs for n in nodes]).astype(np.float64)
    rv = bf16(gv)
    ri = gi.copy()
    rows = len(gi)
    at_once = top_k_rows_equal(gi, gv, ri, rv)
    each = [top_k_equal(gi[i], gv[i], ri[i], rv[i]) for i in range(rows)]
    assert list(zip(*(a.tolist() for a in at_once))) == each, "the two forms disagree"
    differing = int((~at_once[0]).sum())
    one, many = [], []
    for _ in range(args.rounds):
        start = time.process_time()
        for i in range(rows):
            top_k_equal(gi[i], gv[i], ri[i], rv[i])
        one.append(time.process_time() - start)
        start = time.process_time()
        top_k_rows_equal(gi, gv, ri, rv)
        many.append(time.process_time() - start)
    a, b = statistics.median(one), statistics.median(many)
    print(f"{rows} positions, top-{gi.shape[1]}, {differing} unequal under the tie rule; "
          f"median of {args.rounds} rounds, CPU seconds:")
    print(f"  one position at a time: {a:.3f} s ({a / rows * 1e6:.0f} us a position)")
    print(f"  all at once:            {b:.4f} s ({b / rows * 1e6:.2f} us a position)")
    print(f"  ratio: {a / b:.0f}x")


if __name__ == "__main__":
    main()
