"""The store (on SQLite here; on a real PostgreSQL, and with concurrent writers:
tests/integration/test_history_postgres.py): what adding keeps, that a report is one run however
often it is added, that a batch is all or nothing, and that the migrated database is the schema."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from replay.history.database import HistoryError, open_engine
from replay.history.ingest import NotAReport, records
from replay.history.queries import golden_keys
from replay.history.schema import metadata
from replay.history.store import GoldenSelector, HistoryStore
from tests.support.history_reports import run_report, sample


def add(url: str, *docs: dict) -> tuple[int, int]:
    with HistoryStore.open(url) as store:
        done = store.add([r for d in docs for r in records(d)])
        return done.added, done.duplicates


def counts(url: str) -> tuple[int, int]:
    with HistoryStore.open(url) as store:
        return store.counts()


def tallies(url: str) -> tuple[dict, dict]:
    """(request tallies, hit tallies) as the store keeps them, and as counted here from every
    outcome: the two must agree."""
    from collections import Counter

    from sqlalchemy import select

    from replay.history.schema import hit_tallies, outcomes, request_tallies, runs

    with HistoryStore.open(url) as store:
        kept = ({(r["golden_key"], r["request_id"], r["server_version"], r["flags_sha256"],
                  r["status"], r["divergence_position"]): (r["n"], r["passes"])
                 for r in store.rows(select(request_tallies))},
                {(r["golden_key"], r["server_version"], r["cached_tokens"], r["tiers"]): r["n"]
                 for r in store.rows(select(hit_tallies))})
        rows = store.rows(select(outcomes, runs.c.server_version, runs.c.flags_sha256)
                          .join(runs, runs.c.id == outcomes.c.run_id))
    n, passes, hits = Counter(), Counter(), Counter()
    for o in rows:
        key = (o["golden_key"], o["request_id"], o["server_version"], o["flags_sha256"],
               o["status"], -1 if o["divergence_position"] is None else o["divergence_position"])
        n[key] += 1
        passes[key] += int(o["passed"])
        hits[(o["golden_key"], o["server_version"],
              -1 if o["cached_tokens"] is None else o["cached_tokens"], o["tiers"] or "")] += 1
    return kept, ({k: (v, passes[k]) for k, v in n.items()}, dict(hits))


def test_a_report_becomes_one_run_with_an_outcome_per_request(history_url):
    doc = sample("failing")
    assert add(history_url, doc) == (1, 0)
    with HistoryStore.open(history_url) as store:
        [run] = store.list_runs()
        outs = store.outcomes_of(run["id"])
    assert run["verdict"] == "fail" and run["golden_name"] == doc["golden"]
    assert run["requests"] == 27 and run["requests_failed"] == 4
    assert [o["request_id"] for o in outs] == [r["id"] for r in doc["requests"]]
    drifted = next(o for o in outs if o["request_id"] == "g2/b0/t2")
    assert drifted["divergence_position"] == 37 and drifted["divergence_kind"] == "token"
    assert json.loads(drifted["tiers"]) == {"device": 112, "host": 64, "storage": 32}
    assert drifted["cached_tokens"] == 208


def test_a_report_added_twice_is_one_run(history_url):
    doc = run_report(hour=1)
    assert add(history_url, doc) == (1, 0)
    assert add(history_url, doc, json.loads(json.dumps(doc, indent=4))) == (0, 2)
    assert counts(history_url) == (1, 27)


def test_a_matrix_report_adds_one_run_per_profile(history_url):
    assert add(history_url, sample("matrix")) == (4, 0)
    with HistoryStore.open(history_url) as store:
        servers = sorted(r["server"] for r in store.list_runs())
    assert len(servers) == 4 and "launch:hicache-kernel-io" in servers


def test_a_batch_with_one_refused_report_adds_nothing(history_url):
    good, bad = run_report(hour=1), run_report(hour=2)
    bad["requests"][3]["passed"] = "yes"
    with pytest.raises(NotAReport, match="passed is 'yes'"):
        add(history_url, good, bad)
    assert counts(history_url) == (0, 0)


def test_a_failing_write_rolls_the_whole_batch_back(history_url):
    """A batch the database itself refuses midway (here the second run holds one request
    position twice) leaves nothing behind either."""
    first, second = records(run_report(hour=1)) + records(run_report(hour=2))
    broken = replace(second, outcomes=second.outcomes + second.outcomes[:1])
    with HistoryStore.open(history_url) as store, pytest.raises(HistoryError, match="nothing added"):
        store.add([first, broken])
    assert counts(history_url) == (0, 0)


def test_runs_are_listed_newest_first_and_selected_by_golden(history_url):
    add(history_url, run_report(hour=1), run_report(hour=3),
        run_report(hour=2, golden_sha256="b" * 64))
    with HistoryStore.open(history_url) as store:
        hours = [r["run_at"].hour for r in store.list_runs()]
        mine = store.list_runs(keys=golden_keys(store, GoldenSelector("aaaaaaaa")))
        limited = store.list_runs(limit=1)
    assert hours == [3, 2, 1]
    assert [r["run_at"].hour for r in mine] == [3, 1]
    assert len(limited) == 1 and limited[0]["run_at"].hour == 3


def test_the_migrated_database_is_the_schema(history_url):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    engine = open_engine(history_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_opening_a_migrated_history_again_changes_nothing(history_url):
    add(history_url, run_report(hour=1))
    assert add(history_url, run_report(hour=2)) == (1, 0)
    assert counts(history_url) == (2, 54)


def test_a_file_that_is_not_a_database_is_a_history_error(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(HistoryError, match="file is not a database"):
        HistoryStore.open(str(junk))


def test_an_unreachable_postgres_is_a_history_error_without_the_password():
    from tests.support.postgres import free_port

    url = f"postgresql://golden:s3cret@127.0.0.1:{free_port()}/nothing"
    with pytest.raises(HistoryError) as exc:
        HistoryStore.open(url)
    assert "s3cret" not in str(exc.value) and "127.0.0.1" in str(exc.value)


def test_the_tallies_count_every_outcome_added_once(history_url):
    add(history_url, run_report(hour=1), run_report(hour=2, failing=("g0/b0/t1",)))
    add(history_url, run_report(hour=1), run_report(hour=3, version="0.6", failing=("g1/b0/t1",)))
    kept, counted = tallies(history_url)
    assert kept == counted and sum(n for n, _ in kept[0].values()) == 3 * 27


def test_pruning_deletes_old_runs_and_recounts_the_tallies(history_url):
    from datetime import datetime

    add(history_url, run_report(hour=1, failing=("g0/b0/t1",)), run_report(hour=5),
        run_report(hour=6, golden_sha256="b" * 64))
    with HistoryStore.open(history_url) as store:
        assert store.prune(datetime(2026, 9, 1, 3)) == 1
        assert [r["run_at"].hour for r in store.list_runs()] == [6, 5]
    assert counts(history_url) == (2, 54)
    kept, counted = tallies(history_url)
    assert kept == counted and sum(n for n, _ in kept[0].values()) == 54


def test_two_runs_alike_in_all_but_their_run_id_are_two_runs(history_url):
    """Two replays that finish in the same second write the same document but for their run
    id: both are kept (the report's digest only refuses the same file twice)."""
    first, second = run_report(hour=1), run_report(hour=1)
    first["run_id"], second["run_id"] = "run-one", "run-two"
    assert add(history_url, first, second) == (2, 0)
    assert add(history_url, first) == (0, 1)
    assert counts(history_url) == (2, 54)


def test_a_run_id_held_with_other_content_is_refused_and_nothing_is_added(history_url):
    held = {**run_report(hour=1), "run_id": "run-one"}
    add(history_url, held)
    edited = {**run_report(hour=1, failing=("g0/b0/t1",)), "run_id": "run-one"}
    with pytest.raises(NotAReport, match="run run-one is in the history already, with other"):
        add(history_url, {**run_report(hour=2), "run_id": "run-two"}, edited)
    assert counts(history_url) == (1, 27)
