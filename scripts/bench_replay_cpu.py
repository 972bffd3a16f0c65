"""The replay's CPU per output position, this tree beside another checkout, in pairs (issue 36).

One run of `golden replay` on this 2-core machine varies by 10-30% in CPU seconds from one run
to the next (other tenants), more than the difference between two trees, so one sample per tree
says nothing. This script records one golden (the `bench_memory` scenario: N requests of 256
output positions, top-5) with this tree, then replays it with each tree in turn, ROUNDS pairs,
the order swapped every round (A B, B A, ...). With `--pin` the protocol stub runs on core 0 and
`golden replay` on core 1 (`sched_setaffinity`), so the two never share a core. Printed: a row
per run, then each tree's summed CPU seconds and the ratio of each pair.

Usage: python3 scripts/bench_replay_cpu.py --base CHECKOUT [--requests 8192] [--rounds 6] [--pin]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import REPO, run_child, start_stub  # noqa: E402
from bench_memory import POSITIONS, scenario  # noqa: E402


REPLAY_ARGS = ["--concurrency", "64", "-q", "--expect-cache", "attention"]  # after GOLDEN --server URL


def record(requests: int, work: Path) -> Path:
    """The `bench_memory` golden of `requests` requests, recorded with this tree into `work`."""
    spec, golden = work / f"s{requests}.toml", work / f"g{requests}.zarr"
    spec.write_text(scenario(requests))
    ref, url = start_stub(radix=False)
    try:
        r = run_child(["record", "--server", url, "--scenario", str(spec), "--out", str(golden),
                       "--concurrency", "64", "-q"])
    finally:
        ref.kill()
    if r[2] != 0:
        raise SystemExit(f"record exited {r[2]}")
    return golden


@contextmanager
def hot_stub(pin: bool) -> Iterator[str]:
    """The radix protocol stub's URL; with `pin` the stub runs on core 0 and whatever this
    process starts inside the block on core 1."""
    every = os.sched_getaffinity(0)
    if pin:
        os.sched_setaffinity(0, {0})
    hot, url = start_stub(radix=True)
    try:
        if pin:
            os.sched_setaffinity(0, {1})
        yield url
    finally:
        hot.kill()
        os.sched_setaffinity(0, every)


def replay(golden: Path, repo: Path, pin: bool) -> tuple[float, float]:
    """Wall and CPU seconds of one `golden replay` run by `repo`'s tool."""
    with hot_stub(pin) as url:
        r = run_child(["replay", str(golden), "--server", url, *REPLAY_ARGS], repo)
    if r[2] != 0:
        raise SystemExit(f"{repo}: replay exited {r[2]}")
    return r[0], r[3]


def parser_with_base(doc: str | None) -> argparse.ArgumentParser:
    """The command line of a side-by-side benchmark: `doc` as its help, `--base CHECKOUT`."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="the other checkout")
    return ap


def main() -> None:
    ap = parser_with_base(__doc__)
    ap.add_argument("--requests", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--pin", action="store_true", help="stub on core 0, the replay on core 1")
    args = ap.parse_args()
    if args.pin and not {0, 1} <= os.sched_getaffinity(0):
        raise SystemExit("--pin needs cores 0 and 1")
    trees = {"this tree": REPO, "base": args.base.resolve()}
    cpu: dict[str, list[float]] = {label: [] for label in trees}
    positions = args.requests * POSITIONS
    print("| round | tree | replay s | replay CPU s | CPU us per position |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="golden-bench-replay-cpu-") as d:
        golden = record(args.requests, Path(d))
        for k in range(args.rounds):
            order = list(trees) if k % 2 == 0 else list(trees)[::-1]
            for label in order:
                wall, seconds = replay(golden, trees[label], args.pin)
                cpu[label].append(seconds)
                print(f"| {k + 1} | {label} | {wall:.1f} | {seconds:.2f} | "
                      f"{seconds * 1e6 / positions:.2f} |", flush=True)
    mine, base = cpu["this tree"], cpu["base"]
    ratios = [a / b for a, b in zip(mine, base)]
    print(f"\n{args.requests} requests, {args.rounds} pairs{', pinned' if args.pin else ''}: "
          f"this tree {sum(mine):.1f} CPU s, base {sum(base):.1f} ({sum(mine) / sum(base) - 1:+.1%}); "
          f"pair ratios {min(ratios):.2f}-{max(ratios):.2f}, median {statistics.median(ratios):.3f}; "
          f"this tree's runs {min(mine):.1f}-{max(mine):.1f} s, the base's {min(base):.1f}-{max(base):.1f}")


if __name__ == "__main__":
    main()
