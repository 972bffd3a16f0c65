"""Load: replay 1,000 conversations at concurrency 256 against the protocol stub.

The stub runs in its own process; `golden record` and `golden replay` run as real subprocesses,
so their peak RSS (ru_maxrss of the child) is the tool's own. Run at two sizes side by side to
show memory stays bounded as the run grows (results are judged as they arrive; only the
judgement is kept).

With `--baseline DIR` the replay also runs with another checkout's `golden` (same golden, same
stub), side by side.

Usage: python3 scripts/bench_load.py [--conversations 1000 250] [--concurrency 256] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STUB = """
import sys, threading
sys.path.insert(0, {repo!r})
from tests.support.stub_server import StubConfig, StubServer
s = StubServer(StubConfig(radix={radix})).start()
print(s.url, flush=True)
threading.Event().wait()
"""


def start_stub(radix: bool) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", STUB.format(repo=str(REPO), radix=radix)],
                            stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    return proc, url


def run_child(args: list[str], repo: Path = REPO) -> tuple[float, int, int, float]:
    """Wall seconds, peak RSS (KiB), exit code and CPU seconds of one golden subprocess (its own
    rusage)."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=repo,
                            stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(repo)})
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (time.perf_counter() - t, usage.ru_maxrss, proc.returncode,
            usage.ru_utime + usage.ru_stime)


def one_size(conversations: int, concurrency: int, work: Path, repo: Path = REPO) -> dict:
    scenario = work / f"load{conversations}.toml"
    scenario.write_text(f"groups = {conversations // 4}\nbranches = 4\nprefix_len = 64\n"
                        "suffix_len = 16\nturns = 1\nturn_suffix_len = 8\nmax_new_tokens = 32\n"
                        "top_k = 5\n")
    golden = work / f"load{conversations}.zarr"
    requests = conversations * 2
    ref, ref_url = start_stub(radix=False)
    try:
        rec = run_child(["record", "--server", ref_url, "--scenario", str(scenario), "--out",
                         str(golden), "--concurrency", str(concurrency), "-q", "--force"], repo)
    finally:
        ref.kill()
    hot, hot_url = start_stub(radix=True)
    try:
        rep = run_child(["replay", str(golden), "--server", hot_url, "--concurrency",
                         str(concurrency), "-q", "--expect-cache", "attention"], repo)
    finally:
        hot.kill()
    return {"conversations": conversations, "requests": requests,
            "record_rps": requests / rec[0], "record_rss_mib": rec[1] / 1024, "record_exit": rec[2],
            "replay_rps": requests / rep[0], "replay_rss_mib": rep[1] / 1024, "replay_exit": rep[2],
            "replay_cpu_ms": rep[3] * 1000 / requests}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, nargs="+", default=[250, 1000])
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--baseline", type=Path, help="another checkout to measure beside this one")
    args = ap.parse_args()
    print("| client | conversations | requests | record req/s | record peak RSS MiB | replay req/s | "
          "replay peak RSS MiB | replay CPU ms/request | replay exit |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    repos = [("this checkout", REPO)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    with tempfile.TemporaryDirectory() as d:
        for n in args.conversations:
            for label, repo in repos:
                r = one_size(n, args.concurrency, Path(d), repo)
                print(f"| {label} | {r['conversations']} | {r['requests']} | {r['record_rps']:.0f} | "
                      f"{r['record_rss_mib']:.0f} | {r['replay_rps']:.0f} | "
                      f"{r['replay_rss_mib']:.0f} | {r['replay_cpu_ms']:.2f} | {r['replay_exit']} |",
                      flush=True)


if __name__ == "__main__":
    main()
