"""Detection matrix at full size: record a preset on the `reference` engine, replay it on the
cached profile with each fault (must fail, only on cached requests), and replay every preset N
times with no fault (must all pass). Prints Markdown tables for docs/faults.md.

Usage: python3 scripts/detection_matrix.py [--scenario hicache-branching] [--repeats 20]
       [--presets hicache-branching single deep wide] [--model tiny] [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay.engine.config import get_config  # noqa: E402
from replay.engine.detection import judge_fault, profile_for, record_reference, replay_report  # noqa: E402
from replay.engine.faults import FAULTS  # noqa: E402
from replay.engine.model import HybridModel  # noqa: E402
from replay.scenario import PRESETS  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="hicache-branching")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--presets", nargs="*", default=list(PRESETS))
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    model = HybridModel(get_config(args.model), 0, args.device)

    t = time.perf_counter()
    golden = record_reference(PRESETS[args.scenario], model)
    print(f"recorded {args.scenario} in {time.perf_counter() - t:.0f} s\n", flush=True)
    print("| fault | profile | verdict | failing requests | statuses | failing without a cache hit |")
    print("| --- | --- | --- | --- | --- | --- |")
    for fault in FAULTS:
        profile = profile_for(fault)
        o = judge_fault(fault, profile, replay_report(golden, model, profile, fault))
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(o.statuses.items()))
        print(f"| {fault} | {profile} | {o.verdict} | {len(o.failing)} / {len(golden.requests)} | "
              f"{statuses} | {len(o.cold_failures)} |", flush=True)

    print("\n| preset | profile | repeats | verdict | repeats failed | hit lengths |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.presets:
        g = golden if name == args.scenario else record_reference(PRESETS[name], model)
        r = replay_report(g, model, "hicache", repeat=args.repeats)
        s = r["summary"]
        hits = ", ".join(f"{k}x{v}" for k, v in s["cache_hit_lengths"].items())
        print(f"| {name} | hicache | {args.repeats} | {r['verdict']} | {s['repeats_failed']} | "
              f"{hits} |", flush=True)


if __name__ == "__main__":
    main()
