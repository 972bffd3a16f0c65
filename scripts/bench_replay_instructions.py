"""The replay's work per request, this tree beside another checkout, in instructions (issue 36).

CPU seconds of one `golden replay` on this shared 2-core machine vary by 10-30% from run to run,
more than the difference being asked about (scripts/bench_replay_cpu.py times pairs). Valgrind's
instruction count of the same run varies by under 0.1%. This script records two goldens with this
tree (the `bench_memory` scenario: 256 output positions a request, top-5), SMALL and LARGE
requests, and counts, for each tree, the instructions of

- `replay`: the `golden replay` process against the protocol stub (the stub, in another process,
  is not counted), and
- `golden`: what that replay asks of the golden alone, with no network: `load_golden` (read or
  open, checksums, the meaning check), then for every request its node, its input and the
  request itself, as the replay reads them;

and prints each per request as (LARGE - SMALL) / (LARGE - SMALL requests), which cancels start-up
(imports) and leaves the cost that grows with the golden; `replay - golden` is everything else
the client does per request (send, parse, judge, report). Instructions weigh a Python-level read
of one request against a vectorised read of a whole array unlike CPU time does (SIMD and memory
stalls count little), so `--seconds` also times the golden work natively in alternating rounds.

Needs valgrind (`apt-get install valgrind`); a LARGE of 1024 takes about 4 minutes a tree.

Usage: python3 scripts/bench_replay_instructions.py --base CHECKOUT [--small 256] [--large 1024]
       [--seconds 8192]
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import REPO  # noqa: E402
from bench_replay_cpu import REPLAY_ARGS, hot_stub, parser_with_base, record  # noqa: E402

# what replay_golden asks of the golden, request by request (run in the tree being measured)
GOLDEN_WORK = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tree!r})
from replay.jobs.session import load_golden
t0 = time.process_time()
golden = load_golden(Path({path!r}))
nodes = golden.nodes if hasattr(golden, "nodes") else golden.requests
for i in range(len(golden.requests)):
    nodes[i]
    golden.input_ids(i)
    golden.requests[i]
print(time.process_time() - t0)
"""


def instructions(argv: list[str], cwd: Path) -> int:
    """Instructions valgrind counts for `argv` (this interpreter's own binary, not a shim)."""
    p = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
                       cwd=cwd, env={**os.environ, "PYTHONPATH": str(cwd)},
                       capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", p.stderr)
    if p.returncode != 0 or not found:
        raise SystemExit(f"{' '.join(argv[:4])} in {cwd}: exit {p.returncode}\n{p.stderr[-2000:]}")
    return int(found.group(1))


def replay_instructions(golden: Path, tree: Path) -> int:
    """The `golden replay` process, on core 1 with the stub on core 0 where there are two."""
    with hot_stub({0, 1} <= os.sched_getaffinity(0)) as url:
        return instructions([sys.executable, "-m", "cli", "replay", str(golden), "--server", url,
                             *REPLAY_ARGS], tree)


def golden_instructions(golden: Path, tree: Path) -> int:
    return instructions([sys.executable, "-c", GOLDEN_WORK.format(tree=str(tree),
                                                                  path=str(golden))], tree)


def golden_seconds(golden: Path, tree: Path) -> float:
    out = subprocess.run([sys.executable, "-c", GOLDEN_WORK.format(tree=str(tree),
                                                                   path=str(golden))],
                         cwd=tree, capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def main() -> None:
    ap = parser_with_base(__doc__)
    ap.add_argument("--small", type=int, default=256)
    ap.add_argument("--large", type=int, default=1024)
    ap.add_argument("--seconds", type=int, default=0, metavar="REQUESTS",
                    help="also time the golden work natively on a golden of this many requests, "
                         "5 alternating rounds (0: skip)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("error: valgrind not found; hint: apt-get install valgrind")
    if args.large <= args.small:
        raise SystemExit("error: --large must be more requests than --small")
    trees = {"this tree": REPO, "base": args.base.resolve()}
    per: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="golden-bench-instructions-") as d:
        small, large = record(args.small, Path(d)), record(args.large, Path(d))
        n = args.large - args.small
        print("| tree | what | instructions, small | instructions, large | per request |")
        print("| --- | --- | --- | --- | --- |")
        for label, tree in trees.items():
            per[label] = {}
            for what, count in (("replay", replay_instructions), ("golden", golden_instructions)):
                a, b = count(small, tree), count(large, tree)
                per[label][what] = (b - a) / n
                print(f"| {label} | {what} | {a:,} | {b:,} | {(b - a) / n:,.0f} |", flush=True)
        print()
        for what in ("replay", "golden"):
            mine, base = per["this tree"][what], per["base"][what]
            print(f"{what}: {mine:,.0f} instructions a request, base {base:,.0f} "
                  f"({mine / base - 1:+.1%})")
        rest = {label: p["replay"] - p["golden"] for label, p in per.items()}
        print(f"replay - golden: {rest['this tree']:,.0f}, base {rest['base']:,.0f} "
              f"({rest['this tree'] / rest['base'] - 1:+.1%})")
        if args.seconds:
            timed = record(args.seconds, Path(d))
            seconds: dict[str, list[float]] = {label: [] for label in trees}
            for k in range(5):
                for label in (list(trees) if k % 2 == 0 else list(trees)[::-1]):
                    seconds[label].append(golden_seconds(timed, trees[label]))
            for label, values in seconds.items():
                print(f"golden work, {args.seconds} requests, {label}: CPU s "
                      f"{', '.join(f'{v:.2f}' for v in values)} (median "
                      f"{statistics.median(values):.2f})")


if __name__ == "__main__":
    main()
