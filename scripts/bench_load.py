"""Load: replay 1,000 conversations at concurrency 256 against the protocol stub.

The stub runs in its own process; `golden record` and `golden replay` run as real subprocesses,
so their peak RSS (ru_maxrss of the child) is the tool's own. Run at two sizes side by side to
show memory stays bounded as the run grows (results are judged as they arrive; only the
judgement is kept).

Usage: python3 scripts/bench_load.py [--conversations 1000 250] [--concurrency 256]
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


def run_child(args: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (KiB) and exit code of one golden subprocess (its own rusage)."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t, usage.ru_maxrss, proc.returncode


def one_size(conversations: int, concurrency: int, work: Path) -> dict:
    scenario = work / f"load{conversations}.toml"
    scenario.write_text(f"groups = {conversations // 4}\nbranches = 4\nprefix_len = 64\n"
                        "suffix_len = 16\nturns = 1\nturn_suffix_len = 8\nmax_new_tokens = 32\n"
                        "top_k = 5\n")
    golden = work / f"load{conversations}.zarr"
    requests = conversations * 2
    ref, ref_url = start_stub(radix=False)
    try:
        rec = run_child(["record", "--server", ref_url, "--scenario", str(scenario), "--out",
                         str(golden), "--concurrency", str(concurrency), "-q", "--force"])
    finally:
        ref.kill()
    hot, hot_url = start_stub(radix=True)
    try:
        rep = run_child(["replay", str(golden), "--server", hot_url, "--concurrency",
                         str(concurrency), "-q", "--expect-cache", "attention"])
    finally:
        hot.kill()
    return {"conversations": conversations, "requests": requests,
            "record_rps": requests / rec[0], "record_rss_mib": rec[1] / 1024, "record_exit": rec[2],
            "replay_rps": requests / rep[0], "replay_rss_mib": rep[1] / 1024, "replay_exit": rep[2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, nargs="+", default=[250, 1000])
    ap.add_argument("--concurrency", type=int, default=256)
    args = ap.parse_args()
    print("| conversations | requests | record req/s | record peak RSS MiB | replay req/s | "
          "replay peak RSS MiB | replay exit |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as d:
        for n in args.conversations:
            r = one_size(n, args.concurrency, Path(d))
            print(f"| {r['conversations']} | {r['requests']} | {r['record_rps']:.0f} | "
                  f"{r['record_rss_mib']:.0f} | {r['replay_rps']:.0f} | {r['replay_rss_mib']:.0f} | "
                  f"{r['replay_exit']} |", flush=True)


if __name__ == "__main__":
    main()
