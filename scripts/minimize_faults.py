"""Minimize a golden against every injected fault and check each repro (docs/faults.md's table).

For each fault: `golden minimize GOLDEN --launch embedded-PROFILE --fault F` (in process, one
launched server for the whole search), then three checks on the result, each a real process:
the sub-golden passes `golden verify`; `repro.sh` (default: the same faulty launch) exits 1;
`golden replay` of the sub-golden on the same profile without the fault exits 0. Prints one
Markdown row per fault as it finishes; the outputs stay in --out/FAULT/.

    python3 scripts/minimize_faults.py [--golden goldens/hicache-branching.zarr] [--out DIR]
        [--faults a,b] [--budget 40runs]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from replay.jobs.detection import profile_for  # noqa: E402
from replay.engine.faults import FAULTS  # noqa: E402
from replay.golden.store import read_golden, verify_golden  # noqa: E402
from replay.jobs.minimize.search import parse_budget  # noqa: E402
from replay.jobs.minimize.session import MinimizeSettings, minimize_golden  # noqa: E402
from replay.server.target import ServerTarget  # noqa: E402

HEADER = ("| fault | profile | failure kept | requests before -> after (conversations) | "
          "replays | seconds | kept | failing in the repro (cached tokens by tier) | "
          "repro fails with the fault | passes without | 1-minimal |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def run(cmd: list[str], log: Path) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GOLDEN": f"{sys.executable} -m cli"}
    with log.open("w") as f:
        return subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT).returncode


def failing_hits(report: dict) -> str:
    parts = []
    for r in report["requests"]:
        if not r["passed"]:
            tiers = ", ".join(f"{k} {v}" for k, v in sorted(r["cached_tokens_details"].items())
                              if v) or "none"
            parts.append(f"{r['id']} {r['status']} ({r['cached_tokens']}: {tiers})")
    return "; ".join(parts)


def minimize_one(fault: str, golden: Path, out: Path, budget: str | None) -> str:
    profile = profile_for(fault)
    launch = f"embedded-{profile}"
    logs = out / "logs"
    target = ServerTarget(profile=launch, fault=fault, log_dir=logs)
    settings = MinimizeSettings(api="sglang", budget=parse_budget(budget))
    t0 = time.monotonic()
    result = minimize_golden(golden, target, out / fault, settings, force=True,
                             progress=lambda line: print(f"[{fault}] {line}", file=sys.stderr,
                                                         flush=True))
    seconds = time.monotonic() - t0
    doc = json.loads((out / fault / "minimize.json").read_text())
    sub = out / fault / "golden.zarr"
    verified = not verify_golden(sub)
    faulty = run(["sh", str(out / fault / "repro.sh"), "--log-dir", str(logs), "-q"],
                 out / fault / "repro-faulty.log")
    clean = run([sys.executable, "-m", "cli", "replay", str(sub), "--launch", launch,
                 "--api", "sglang", "--schedule", result.final.schedule,
                 "--concurrency", str(result.final.concurrency), "--log-dir", str(logs), "-q"],
                out / fault / "replay-clean.log")
    report = json.loads((out / fault / "report.json").read_text())
    kept = ", ".join(r.id for r in read_golden(sub).requests)
    before, after = doc["start"], doc["result"]
    return (f"| {fault} | {profile} | {doc['failure']['class']} | {before['requests']} -> "
            f"{after['requests']} ({before['conversations']} -> {after['conversations']}) | "
            f"{doc['replays']} | {seconds:.0f} | {kept} | {failing_hits(report)} | "
            f"{'yes' if faulty == 1 else f'NO (exit {faulty})'} | "
            f"{'yes' if clean == 0 else f'NO (exit {clean})'} | "
            f"{'yes' if doc['one_minimal'] else 'no (budget)'}"
            f"{'' if verified else ' (golden verify FAILED)'} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--golden", type=Path, default=ROOT / "goldens/hicache-branching.zarr")
    parser.add_argument("--out", type=Path, default=Path("/tmp/minimize-faults"))
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--budget", default=None, help="per fault, e.g. 40runs or 20m")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(HEADER, flush=True)
    for fault in args.faults.split(","):
        print(minimize_one(fault, args.golden, args.out, args.budget), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
