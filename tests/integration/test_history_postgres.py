"""The history on a real PostgreSQL server (tests/support/postgres.py: a throw-away cluster of
Debian's postgresql): every unit test of the database, the store and the queries that takes
`history_url`, run again here (tests/unit/history/ runs them on SQLite, in-process), and what
needs other processes or PostgreSQL itself: concurrent writers on both backends, a server that
never answers, a statement past its timeout."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import text

from replay.history.database import HistoryTimeout
from replay.history.ingest import records
from replay.history.store import HistoryStore
from tests.support import paths
from tests.support.history_reports import run_report, write
from tests.support.postgres import history_url, on_postgres, postgres  # noqa: F401 - fixtures
from tests.unit.history import test_database, test_queries, test_store
from tests.unit.history.test_database import one_line, raw
from tests.unit.history.test_store import counts, tallies

globals().update(on_postgres(test_database, test_store, test_queries))


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


# --- timeouts: a database that never answers, a statement that runs too long -----------------

SILENT = """
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
held = []
while True:
    held.append(s.accept()[0])  # accepted, never answered
"""
OPEN = """
import sys
import replay.history.database as database
database.CONNECT_SECONDS = 1
from replay.history.store import HistoryStore
HistoryStore.open(sys.argv[1])
"""


def test_a_database_that_accepts_and_never_answers_times_out_in_one_line():
    silent = subprocess.Popen([sys.executable, "-c", SILENT], stdout=subprocess.PIPE, text=True)
    try:
        port = silent.stdout.readline().strip()
        opened = subprocess.run([sys.executable, "-c", OPEN,
                                 f"postgresql://golden:s3cret@127.0.0.1:{port}/golden"],
                                capture_output=True, text=True, timeout=60, cwd=paths.REPO)
    finally:
        silent.kill()
        silent.wait()
    last = opened.stderr.strip().splitlines()[-1]
    assert "HistoryTimeout" in last and "connect timeout" in last and "s3cret" not in last


def test_a_statement_past_the_statement_timeout_is_a_named_one_line_error(postgres, monkeypatch):
    import replay.history.database as database

    url = postgres.new_database()
    HistoryStore.open(url).close()
    engine = raw(url)
    with engine.begin() as conn:  # every run added now takes 5 s
        conn.execute(text("CREATE FUNCTION slow() RETURNS trigger AS $$ BEGIN "
                          "PERFORM pg_sleep(5); RETURN NEW; END $$ LANGUAGE plpgsql"))
        conn.execute(text("CREATE TRIGGER slow BEFORE INSERT ON runs FOR EACH ROW "
                          "EXECUTE FUNCTION slow()"))
    engine.dispose()
    monkeypatch.setattr(database, "STATEMENT_SECONDS", 1)
    with HistoryStore.open(url) as store, pytest.raises(HistoryTimeout) as exc:
        store.add(records(run_report()))
    assert "1 s statement timeout" in one_line(exc)
