"""The history on a real PostgreSQL server (tests/support/postgres.py: a throw-away cluster of
Debian's postgresql): every unit test of the store and the queries that takes `history_url`, run
again here (tests/unit/history/ runs them on SQLite, in-process), and what needs other processes:
concurrent writers, on both backends."""

from __future__ import annotations

import subprocess
import sys

from tests.support import paths
from tests.support.history_reports import run_report, write
from tests.support.postgres import history_url, on_postgres, postgres  # noqa: F401 - fixtures
from tests.unit.history import test_queries, test_store
from tests.unit.history.test_store import counts, tallies

globals().update(on_postgres(test_store, test_queries))


ADDER = """
import sys
from replay.history.ingest import records, read_report
from replay.history.store import HistoryStore
from pathlib import Path
with HistoryStore.open(sys.argv[1]) as store:
    for p in sys.argv[2:]:
        store.add(records(read_report(Path(p))))
"""


def test_concurrent_writers_lose_nothing(history_url, tmp_path):
    """Four processes add at once, into a history none of them has created yet: each its own
    five reports and one report they all share. Every run arrives, the shared one once."""
    shared = write(run_report(hour=999), tmp_path / "shared.json")
    procs = []
    for w in range(4):
        mine = [write(run_report(hour=w * 10 + i), tmp_path / f"w{w}-{i}.json") for i in range(5)]
        procs.append(subprocess.Popen([sys.executable, "-c", ADDER, history_url, str(shared),
                                       *map(str, mine)], cwd=paths.REPO,
                                      stderr=subprocess.PIPE, text=True))
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    assert counts(history_url) == (21, 21 * 27)
    kept, counted = tallies(history_url)
    assert kept == counted
