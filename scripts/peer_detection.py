"""Detection power side by side: SGLang's own cache kit against golden replay, fault by fault.

For no fault and for every injected fault, on the profile that takes the fault's path:
  seed kit:      SGLang's prefill-cache-hit helper (sglang/test/kl_multiturn_utils.py) configured
                 like the seed test (3 groups x 3 branches, 512-token prefix, 2 follow-up turns,
                 interleaved order, temperature 1, the seed's 1e-9 KL threshold), its cache
                 asserts recorded rather than stopping the run (tests/support/seed_kit.py);
  golden replay: the committed golden (goldens/hicache-branching.zarr) replayed through the
                 library `golden replay` runs (replay.jobs.detection.replay_report); a fault
                 that needs a scenario switch (detection.FAULT_SETUPS: prompt logprobs, cache
                 keys) gets hicache-branching recorded with it on the reference first, and each
                 fault runs at the concurrency its setup names.
Prints one Markdown table row per fault for docs/faults.md. Needs sglang installed
(scripts/install_sglang.sh). Each row starts fresh servers: rows can run in separate processes.

Usage: python3 scripts/peer_detection.py [--faults none,host-bf16,...] [--golden PATH]
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
from replay.golden.scenario import PRESETS  # noqa: E402
from replay.engine.faults import FAULTS  # noqa: E402
from replay.engine.model import HybridModel  # noqa: E402
from replay.engine.options import profile_options  # noqa: E402
from replay.engine.server import start_server  # noqa: E402
from replay.golden.model import Golden  # noqa: E402
from replay.golden.store import read_golden  # noqa: E402
from tests.support.seed_kit import SEED_SHAPE, observe_kit  # noqa: E402

SEED_KL_THRESHOLD = 1e-9  # the seed test's KL_DIV_THRESHOLD
HEADER = ("| fault | profile | seed kit: avg KL | seed kit: cache asserts failed | seed kit "
          "catches | golden replay: verdict | failing requests | statuses | seconds |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def row(fault: str | None, golden: Golden, model: HybridModel) -> str:
    started = time.perf_counter()
    profile = profile_for(fault)
    options = profile_options(profile, fault=fault, model=model.config.name, seed=model.seed)
    with start_server(options, model=model) as server:
        kit = observe_kit(server.url, SEED_SHAPE, options.mamba_track_interval)
    setup = setup_for(fault)
    if setup.scenario:
        golden = record_reference(scenario_for(PRESETS["hicache-branching"], fault), model)
    report = replay_report(golden, model, profile, fault, concurrency=setup.concurrency)
    outcome = judge_fault(fault or "none", profile, report)
    kl = "error" if kit.error else ("-" if kit.kl is None else f"{kit.kl:.3g}")
    kit_caught = kit.error is not None or bool(kit.cache_failures) or (
        kit.kl is not None and kit.kl >= SEED_KL_THRESHOLD)
    asserts = f"{len(kit.cache_failures)}" + (f" ({kit.cache_failures[0]})" if kit.cache_failures else "")
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(outcome.statuses.items()))
    return (f"| {fault or '(none)'} | {profile} | {kl} | {asserts} | "
            f"{'yes' if kit_caught else 'no'} | {outcome.verdict} | "
            f"{len(outcome.failing)} / {len(golden.requests)} | {statuses} | "
            f"{time.perf_counter() - started:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faults", default="none," + ",".join(FAULTS),
                    help="comma-separated fault names; 'none' for the clean engine")
    ap.add_argument("--golden", type=Path, default=Path("goldens/hicache-branching.zarr"))
    ap.add_argument("--header", action="store_true", help="print the table header first")
    args = ap.parse_args()
    torch.set_num_threads(1)  # one engine per core; several runs can share a machine
    model = HybridModel(get_config("tiny"), 0, "cpu")
    golden = read_golden(args.golden)
    if args.header:
        print(HEADER, flush=True)
    for name in args.faults.split(","):
        print(row(None if name == "none" else name, golden, model), flush=True)


if __name__ == "__main__":
    main()
