"""Peak memory of `golden record` and `golden replay` as the golden grows (issue 36).

The protocol stub answers in its own process, instantly; `golden record` and `golden replay` run
as real subprocesses, so their peak RSS (ru_maxrss) and CPU time (their own rusage) are the
tool's. Each size records a golden of N requests (8 per group: 4 branches x 2 turns) of 256
output tokens with top-5, then replays it against a radix stub. Printed: a Markdown row per size,
then the marginal bytes and CPU microseconds per output position between the smallest and the
largest size (what each further position costs; flat memory means ~0 bytes).

With `--base CHECKOUT` the same sizes are also recorded and replayed by another checkout's
`golden` (its own golden of each size, its own stubs), one after the other in the same run, so
the two trees' rows compare side by side.

Usage: python3 scripts/bench_memory.py [--requests 1024 8192 32768] [--concurrency 64] [--base DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import REPO, run_child, start_stub  # noqa: E402

POSITIONS = 256
TOP_K = 5


def scenario(requests: int) -> str:
    return (f"groups = {requests // 8}\nbranches = 4\nprefix_len = 64\nsuffix_len = 16\n"
            f"turns = 1\nturn_suffix_len = 8\nmax_new_tokens = {POSITIONS}\ntop_k = {TOP_K}\n")


def one_size(requests: int, concurrency: int, work: Path, repo: Path = REPO) -> dict[str, float]:
    spec = work / f"mem{requests}.toml"
    spec.write_text(scenario(requests))
    golden = work / f"mem{requests}.zarr"
    ref, url = start_stub(radix=False)
    try:
        rec = run_child(["record", "--server", url, "--scenario", str(spec), "--out", str(golden),
                         "--concurrency", str(concurrency), "-q", "--force"], repo)
    finally:
        ref.kill()
    hot, url = start_stub(radix=True)
    try:
        rep = run_child(["replay", str(golden), "--server", url, "--concurrency",
                         str(concurrency), "-q", "--expect-cache", "attention"], repo)
    finally:
        hot.kill()
    if rec[2] != 0 or rep[2] != 0:
        raise SystemExit(f"{requests} requests: record exit {rec[2]}, replay exit {rep[2]}")
    return {"requests": requests, "positions": requests * POSITIONS,
            "record_mib": rec[1] / 1024, "record_s": rec[0], "record_cpu": rec[3],
            "replay_mib": rep[1] / 1024, "replay_s": rep[0], "replay_cpu": rep[3]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, nargs="+", default=[1024, 8192, 32768])
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--base", type=Path, help="another checkout, measured beside this one")
    args = ap.parse_args()
    trees = [("this tree", REPO)] + ([("base", args.base.resolve())] if args.base else [])
    print("| tree | requests | output positions | record peak RSS MiB | record s | record CPU s | "
          "replay peak RSS MiB | replay s | replay CPU s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}
    with tempfile.TemporaryDirectory(prefix="golden-bench-memory-") as d:
        for n in sorted(args.requests):
            for label, repo in trees:
                work = Path(d) / label.replace(" ", "-")
                work.mkdir(exist_ok=True)
                r = one_size(n, args.concurrency, work, repo)
                shutil.rmtree(work)
                rows[label].append(r)
                print(f"| {label} | {n} | {r['positions']} | {r['record_mib']:.0f} | "
                      f"{r['record_s']:.1f} | {r['record_cpu']:.1f} | {r['replay_mib']:.0f} | "
                      f"{r['replay_s']:.1f} | {r['replay_cpu']:.1f} |", flush=True)
    for label, measured in rows.items():
        if len(measured) < 2:
            continue
        a, b = measured[0], measured[-1]
        dpos = b["positions"] - a["positions"]
        for what in ("record", "replay"):
            per_byte = (b[f"{what}_mib"] - a[f"{what}_mib"]) * 2**20 / dpos
            per_cpu = (b[f"{what}_cpu"] - a[f"{what}_cpu"]) * 1e6 / dpos
            growth = b[f"{what}_mib"] / a[f"{what}_mib"] - 1
            print(f"{label}, {what}: {per_byte:.0f} bytes and {per_cpu:.2f} CPU us per further "
                  f"output position; peak RSS {growth:+.0%} from {a['requests']} to "
                  f"{b['requests']} requests")


if __name__ == "__main__":
    main()
