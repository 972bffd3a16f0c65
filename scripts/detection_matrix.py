"""Detection matrix at full size, on committed goldens (recorded on the `reference` engine).

  faults:  replay a golden on the cached profile with each fault: must fail, and only on
           requests that were served from the cache;
  repeats: replay a golden N times with no fault: every repeat must pass (no false positives).

Prints Markdown table rows for docs/faults.md. Several `repeats` runs of one golden can run in
parallel processes and be added up (scripts/h200_detection.sh does that on a 16-core machine).

Usage: python3 scripts/detection_matrix.py faults  [--golden goldens/hicache-branching.zarr]
       python3 scripts/detection_matrix.py repeats --golden goldens/wide.zarr --repeats 20
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay.engine.config import get_config  # noqa: E402
from replay.jobs.detection import (judge_fault, profile_for, record_reference,  # noqa: E402
                                   replay_report, scenario_for, setup_for)
from replay.golden.scenario import ScenarioSpec  # noqa: E402
from replay.engine.faults import FAULTS  # noqa: E402
from replay.engine.model import HybridModel  # noqa: E402
from replay.golden.store import read_golden  # noqa: E402


def faults(golden_path: Path, model: HybridModel, pool: int | None) -> None:
    golden = read_golden(golden_path)
    overrides = {"max_total_tokens": pool} if pool else {}
    print("| fault | profile | verdict | failing requests | statuses | failing without a cache hit | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for fault in FAULTS:
        t = time.perf_counter()
        profile = profile_for(fault)
        setup = setup_for(fault)
        source = golden
        if setup.scenario:  # the fault needs the golden recorded with a switch on
            spec = ScenarioSpec.from_dict(golden.scenario)
            source = record_reference(scenario_for(spec, fault), model)
        o = judge_fault(fault, profile, replay_report(source, model, profile, fault,
                                                      concurrency=setup.concurrency, **overrides))
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(o.statuses.items()))
        print(f"| {fault} | {profile} | {o.verdict} | {len(o.failing)} / {len(golden.requests)} | "
              f"{statuses} | {len(o.cold_failures)} | {time.perf_counter() - t:.0f} |", flush=True)


def repeats(golden_path: Path, model: HybridModel, n: int, profile: str, pool: int | None) -> None:
    t = time.perf_counter()
    overrides = {"max_total_tokens": pool} if pool else {}
    r = replay_report(read_golden(golden_path), model, profile, repeat=n, **overrides)
    s = r["summary"]
    hits = ", ".join(f"{k}x{v}" for k, v in s["cache_hit_lengths"].items())
    tiers = ", ".join(f"{k} {v}" for k, v in sorted(s["cached_tokens_by_tier"].items()))
    print(f"| {golden_path.stem} | {profile} | {n} | {r['verdict']} | {s['repeats_failed']} | "
          f"{s['tokens_compared']} | {hits} | {tiers} | {time.perf_counter() - t:.0f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["faults", "repeats"])
    ap.add_argument("--golden", type=Path, default=Path("goldens/hicache-branching.zarr"))
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--profile", default="hicache")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pool", type=int, help="device pool in tokens (default: the profile's)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # one engine per core; several runs can share a machine
    model = HybridModel(get_config("tiny"), 0, args.device)
    if args.what == "faults":
        faults(args.golden, model, args.pool)
    else:
        repeats(args.golden, model, args.repeats, args.profile, args.pool)


if __name__ == "__main__":
    main()
