"""ci-quick, measured: what a replay costs in server tokens and seconds beside hicache-branching,
and clean replays repeated (no false positive) on the profiles ci-quick's faults use.

  python3 scripts/ci_quick.py cost                 # one clean replay of each preset, side by side
  python3 scripts/ci_quick.py faults               # every fault on ci-quick, as FAULT_SETUPS says
  python3 scripts/ci_quick.py repeats --repeats 20 # ci-quick clean, 20 repeats per configuration

Server tokens: prompt tokens sent (prefill asked), prefill computed (prompt tokens not served
from the cache), decode tokens. Prints Markdown table rows for docs/benchmarks.md and
docs/faults.md. The engine runs in process, one torch thread.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay.engine.config import get_config  # noqa: E402
from replay.engine.model import HybridModel  # noqa: E402
from replay.golden.model import Golden  # noqa: E402
from replay.golden.scenario import PRESETS  # noqa: E402
from replay.golden.store import read_golden  # noqa: E402
from replay.engine.faults import FAULTS  # noqa: E402
from replay.jobs.detection import (CI_QUICK, CI_QUICK_ENGINE, fault_report, judge_fault,  # noqa: E402
                                   profile_for, recorded, record_reference, replay_report,
                                   setup_for)


def tokens(golden: Golden) -> tuple[int, int]:
    prompt = sum(len(golden.input_ids(i)) for i in range(len(golden.requests)))
    return prompt, sum(len(r.output_ids) for r in golden.requests)


def cost_row(name: str, golden: Golden, model: HybridModel, **engine: object) -> str:
    started = time.perf_counter()
    report = replay_report(golden, model, "hicache", **engine)
    seconds = time.perf_counter() - started
    prompt, decode = tokens(golden)
    cached = sum(r["cached_tokens"] for r in report["requests"])
    pool = engine.get("max_total_tokens", "3072 (profile)")
    return (f"| {name} | {len(golden.requests)} | {pool} | {prompt} | {prompt - cached} | {decode} | "
            f"{prompt + decode} | {report['verdict']} | {seconds:.0f} |")


def repeats_row(label: str, golden: Golden, model: HybridModel, profile: str, repeats: int,
                **engine: object) -> str:
    started = time.perf_counter()
    report = replay_report(golden, model, profile, repeat=repeats, **engine)
    s = report["summary"]
    hits = ", ".join(f"{k}x{v}" for k, v in s["cache_hit_lengths"].items())
    tiers = ", ".join(f"{k} {v}" for k, v in sorted(s["cached_tokens_by_tier"].items()))
    return (f"| {label} | {profile} | {repeats} | {report['verdict']} | {s['repeats_failed']} | "
            f"{s['tokens_compared']} | {s['prompt_logprobs_compared']} | {s['retracted_requests']} | "
            f"{hits} | {tiers} | {time.perf_counter() - started:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("cost", "faults", "repeats"))
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--golden", type=Path, default=Path("goldens/hicache-branching.zarr"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = HybridModel(get_config("tiny"), 0, "cpu")
    spec = PRESETS[CI_QUICK]
    goldens: dict[str, Golden] = {}
    quick = recorded(spec, model, goldens)
    if args.what == "faults":
        print("| fault | profile | concurrency | verdict | failing requests | statuses | "
              "failing without a cache hit | seconds |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for fault in sorted(FAULTS):
            started = time.perf_counter()
            report = fault_report(spec, model, fault, goldens, **CI_QUICK_ENGINE)
            o = judge_fault(fault, profile_for(fault), report)
            statuses = ", ".join(f"{k} {v}" for k, v in sorted(o.statuses.items()))
            print(f"| {fault} | {o.profile} | {setup_for(fault).concurrency} | {o.verdict} | "
                  f"{len(o.failing)} / {len(quick.requests)} | {statuses} | "
                  f"{len(o.cold_failures)} | {time.perf_counter() - started:.0f} |", flush=True)
        return
    if args.what == "cost":
        print("| preset | requests | device pool | prompt tokens sent | prefill computed | "
              "decode tokens | server tokens (sent + decode) | verdict | seconds |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        print(cost_row("hicache-branching", read_golden(args.golden), model), flush=True)
        print(cost_row(CI_QUICK, quick, model, **CI_QUICK_ENGINE), flush=True)
        return
    plain = record_reference(replace(spec, name="ci-quick-plain", salted=0, prompt_logprobs=0), model)
    print("| golden | profile | repeats | verdict | repeats failed | tokens compared | "
          "prompt logprobs compared | retracted requests | hit lengths | cached tokens by tier | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    pool = dict(CI_QUICK_ENGINE)
    print(repeats_row(CI_QUICK, quick, model, "hicache", args.repeats, **pool), flush=True)
    print(repeats_row(CI_QUICK, quick, model, "hicache-write-back", args.repeats, **pool), flush=True)
    print(repeats_row("ci-quick (plain), retract every 7 steps, jitter seed 1", plain, model,
                      "hicache", args.repeats, test_retract_interval=7, schedule_jitter_seed=1,
                      **pool), flush=True)


if __name__ == "__main__":
    main()
