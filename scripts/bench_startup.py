"""Whole-process costs of the CLI, side by side in one run: start-up and a small replay.

Measures, as separate processes (what a CI step pays), the median wall time of:
1. `golden --help`;
2. `golden verify goldens/hicache-branching.zarr`;
3. `golden replay` of the 27-request hicache-branching golden against a fast stub (an in-process
   protocol stub in this script's own process, answering at once), next to
4. a plain sequential stdlib client process (http.client + json) sending the same 27 request
   bodies to the same stub (no verification, no diff, no report): the floor to compare with.
With `--base DIR` (a checkout of an older commit) rows 1-3 are measured for it too, in the same
run, so the ratio says what a change did. `python3 -c pass` is shown as the interpreter's floor.

Usage: python3 scripts/bench_startup.py [--runs 7] [--base /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from replay.golden.store import read_golden  # noqa: E402
from replay.server.apis.sglang import generate_body  # noqa: E402
from tests.support.stub_server import StubConfig, StubServer  # noqa: E402

GOLDEN = ROOT / "goldens" / "hicache-branching.zarr"
PLAIN_CLIENT = """
import http.client, json, sys
from urllib.parse import urlsplit
url = urlsplit(sys.argv[1])
bodies = json.load(open(sys.argv[2]))
conn = http.client.HTTPConnection(url.hostname, url.port)
for body in bodies:
    conn.request("POST", "/generate", json.dumps(body), {"Content-Type": "application/json"})
    answer = json.loads(conn.getresponse().read())
    assert len(answer["output_ids"]) == body["sampling_params"]["max_new_tokens"]
"""


def timed(argv: list[str], env: dict[str, str], runs: int, ok: tuple[int, ...] = (0,),
          cwd: Path = ROOT) -> float:
    """Median wall time. `cwd` matters: `python3 -c` puts the working directory first on
    sys.path, so each checkout's commands run from that checkout."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=cwd)
        times.append(time.perf_counter() - t0)
        if proc.returncode not in ok:
            raise SystemExit(f"{argv} exited {proc.returncode}: {proc.stderr[-500:]}")
    return statistics.median(times)


def golden_cmd(checkout: Path) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    return [sys.executable, "-c", "from cli.main import app; app(prog_name='golden')"], env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--base", type=Path, default=None)
    args = ap.parse_args()
    golden = read_golden(GOLDEN)
    bodies = [generate_body(golden.input_ids(i), r.max_new_tokens, golden.top_k)
              for i, r in enumerate(golden.requests)]
    checkouts = [("this change", ROOT)] + ([("base", args.base)] if args.base else [])
    rows: list[tuple[str, str, float]] = []
    with tempfile.TemporaryDirectory() as tmp, StubServer(StubConfig(vocab_size=4096)) as stub:
        bodies_file = Path(tmp) / "bodies.json"
        bodies_file.write_text(json.dumps(bodies))
        rows.append(("python3 -c pass", "-", timed([sys.executable, "-c", "pass"], dict(os.environ), args.runs)))
        for label, checkout in checkouts:
            argv, env = golden_cmd(checkout)
            rows.append(("golden --help", label, timed(argv + ["--help"], env, args.runs, cwd=checkout)))
            rows.append(("golden verify", label,
                         timed(argv + ["verify", str(GOLDEN)], env, args.runs, cwd=checkout)))
            # the stub is not the engine: the verdict is `fail` (exit 1); only the time matters
            replay = argv + ["replay", str(GOLDEN), "--server", stub.url, "-q",
                             "--allow-model-mismatch", "--expect-cache", "none"]
            rows.append(("golden replay (27 requests)", label,
                         timed(replay, env, args.runs, (1,), cwd=checkout)))
        plain = [sys.executable, "-c", PLAIN_CLIENT, stub.url, str(bodies_file)]
        rows.append(("plain stdlib client (27 requests)", "-", timed(plain, dict(os.environ), args.runs)))
    print(f"| command | checkout | median wall s ({args.runs} runs) |")
    print("| --- | --- | --- |")
    for name, label, t in rows:
        print(f"| {name} | {label} | {t:.3f} |")


if __name__ == "__main__":
    main()
