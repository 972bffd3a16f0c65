#!/usr/bin/env python3
"""The results history at 10,000 runs: does adding and querying stay interactive?

Fills a history with RUNS runs of one golden (the sample report's 27 requests each, so
27 outcome rows per run; server versions and failing requests varied), then times what a user
waits for, side by side on SQLite and (with --postgres, a throw-away server started here from
Debian's package, as the tests do) PostgreSQL:
- the bulk load (batches of 500 runs per transaction): runs per second;
- adding one more report to the full history, as `--history` does after a replay (open the
  store, add one run in its own transaction, close): median of 20;
- `golden history` (the newest 50 runs), `golden history show` (timeline, flake rate per
  request, bisect, coverage over all RUNS runs) and `golden history page`, in-process: median
  of 5; and the two CLI commands end to end as subprocesses (Python start-up included): one run.

    python3 scripts/bench_history.py [--runs 10000] [--postgres]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from replay.history.commands import write_page  # noqa: E402
from replay.history.ingest import records  # noqa: E402
from replay.history.queries import golden_history  # noqa: E402
from replay.history.store import GoldenSelector, HistoryStore  # noqa: E402

SAMPLE = json.loads((REPO / "tests" / "data" / "reports" / "passing.json").read_text())
VERSIONS = [f"0.5.{n}" for n in range(1, 21)]
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def report(i: int, rng: random.Random) -> dict[str, Any]:
    doc = copy.deepcopy(SAMPLE)
    doc["golden_sha256"] = "c" * 64
    meta = doc["server_meta"]
    meta["created"] = (START + timedelta(minutes=15 * i)).isoformat(timespec="seconds")
    version = VERSIONS[min(i // 500, len(VERSIONS) - 1)]  # a nightly: 500 runs per version
    meta["server_info"] = {**meta["server_info"], "version": version}
    meta["run"] = i  # every document distinct
    failing = {r["id"] for r in doc["requests"] if rng.random() < 0.02}
    for r in doc["requests"]:
        if r["id"] in failing:
            r.update(status="logprob_drift", passed=False,
                     first_divergence={"position": rng.randrange(40), "kind": "logprob"})
    doc["verdict"] = "fail" if failing else "pass"
    return doc


def median_seconds(fn: Callable[[], Any], n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cli_seconds(*args: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cli", *args], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def bench(where: str, runs: int, label: str, work: Path) -> dict[str, Any]:
    rng = random.Random(7)
    batch = 500
    t = time.perf_counter()
    with HistoryStore.open(where) as store:
        for start in range(0, runs, batch):
            store.add([r for i in range(start, min(start + batch, runs))
                       for r in records(report(i, rng))])
    load = time.perf_counter() - t
    extra = iter(range(runs, runs + 1000))

    def add_one() -> None:
        with HistoryStore.open(where) as store:
            store.add(records(report(next(extra), rng)))

    selector = GoldenSelector("c" * 12)
    with HistoryStore.open(where) as store:
        counts = store.counts()
        listing = median_seconds(lambda: store.list_runs(limit=50), 5)
        show = median_seconds(lambda: golden_history(store, selector), 5)
    return {
        "backend": label, "runs": counts[0], "outcomes": counts[1],
        "load_runs_per_s": runs / load,
        "add_one_s": median_seconds(add_one, 20),
        "list_s": listing, "show_s": show,
        "page_s": median_seconds(lambda: write_page(where, work / f"page-{label}"), 5),
        "cli_list_s": cli_seconds("history", "--db", where),
        "cli_show_s": cli_seconds("history", "show", "c" * 12, "--db", where),
        "bytes_per_run": _size(where) / counts[0] if _size(where) else None,
    }


def _size(where: str) -> int:
    """The SQLite file's size (with its write-ahead log); 0 for a database server."""
    path = Path(where)
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal"))
               if p.exists()) if path.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--postgres", action="store_true", help="also on a throw-away PostgreSQL")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        results.append(bench(str(work / "history.sqlite"), args.runs, "sqlite", work))
        if args.postgres:
            from tests.support.postgres import start_postgres

            server = start_postgres()
            pg = next(server)
            try:
                results.append(bench(pg.new_database(), args.runs, "postgresql", work))
            finally:
                server.close()
    print(f"{'backend':<11} {'runs':>6} {'outcomes':>8} {'load runs/s':>11} {'add 1':>7} "
          f"{'list':>7} {'show':>7} {'page':>7} {'cli list':>8} {'cli show':>8} {'KiB/run':>7}")
    for r in results:
        print(f"{r['backend']:<11} {r['runs']:>6} {r['outcomes']:>8} {r['load_runs_per_s']:>11.0f} "
              f"{r['add_one_s']:>6.3f}s {r['list_s']:>6.3f}s {r['show_s']:>6.3f}s "
              f"{r['page_s']:>6.3f}s {r['cli_list_s']:>7.2f}s {r['cli_show_s']:>7.2f}s "
              f"{r['bytes_per_run'] / 1024 if r['bytes_per_run'] else float('nan'):>7.1f}")


if __name__ == "__main__":
    main()
