"""Opening a history (on SQLite here; on a real PostgreSQL again in
tests/integration/test_history_postgres.py): a database that is not a history is refused and
left as it was, a newer one is named, every failure is a named one-line error without any
secret, and a lock held too long times out (connecting and statements: there too)."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from sqlalchemy import create_engine, inspect, text

from replay.history.database import (HistoryTimeout, HistoryUnreachable, NewerHistory,
                                     NotAHistory, engine_url, locate)
from replay.history.ingest import records
from replay.history.store import HistoryStore
from replay.utils.errors import UsageError
from tests.support.history_reports import run_report


def raw(url: str):
    return create_engine(engine_url(url))


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message and message.startswith("history ")
    return message


def test_a_database_of_another_application_is_refused_and_gets_no_table(history_url):
    engine = raw(history_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE accounts (id INTEGER PRIMARY KEY, owner TEXT)"))
    with pytest.raises(NotAHistory) as exc:
        HistoryStore.open(history_url)
    assert "holds other tables (accounts)" in one_line(exc)
    with engine.connect() as conn:
        assert inspect(conn).get_table_names() == ["accounts"]
    engine.dispose()


def test_a_foreign_sqlite_file_is_left_byte_for_byte_and_not_switched_to_wal(tmp_path):
    app = tmp_path / "app.db"
    with sqlite3.connect(app) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ada')")
    before = app.read_bytes()
    with pytest.raises(NotAHistory):
        HistoryStore.open(str(app))
    assert app.read_bytes() == before and not (tmp_path / "app.db-wal").exists()
    with sqlite3.connect(app) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_history_of_a_newer_schema_is_named_not_unexpected(history_url):
    HistoryStore.open(history_url).close()
    engine = raw(history_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(NewerHistory) as exc:
        HistoryStore.open(history_url)
    assert "written by a newer golden-replay (schema revision '0099'" in one_line(exc)


def test_another_application_s_alembic_database_is_not_a_history(history_url):
    engine = raw(history_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('ae1027a6acf')"))
    engine.dispose()
    with pytest.raises(NotAHistory, match="not a golden-replay history's"):
        HistoryStore.open(history_url)


def test_a_history_of_the_first_schema_is_upgraded_keeping_its_runs(history_url):
    """Revision 0001 keyed runs by their report's digest and servers by their whole
    server_info: after the upgrade each run has its run id, and two launches of one server
    (other ports, commands, paths) share one flags key, its tallies counted again."""
    from alembic import command

    from replay.history.database import alembic_config

    engine = raw(history_url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
    a, b = (records(run_report(hour=h, flags={"port": 30000 + h, "launch_command": f"x {h}"},
                               failing=("g0/b0/t1",) if h else ()))[0] for h in (0, 1))
    with engine.begin() as conn:
        for run in (a, b):
            row = {k: v for k, v in vars(run).items()
                   if k not in ("outcomes", "run_id", "profile", "client")}
            row.update(added_at=run.run_at, flags=run.flags.replace("{", '{"port":1,', 1))
            run_id = conn.execute(text(
                "INSERT INTO runs (" + ", ".join(row) + ") VALUES ("
                + ", ".join(f":{k}" for k in row) + ") RETURNING id"), row).scalar()
            for o in run.outcomes:
                conn.execute(text("INSERT INTO outcomes (run_id, position, request_id, repeat, "
                                  "status, passed, golden_key, run_at) VALUES (:r, :p, :i, 0, "
                                  ":s, :ok, :g, :t)"),
                             {"r": run_id, "p": o.position, "i": o.request_id, "s": o.status,
                              "ok": o.passed, "g": run.golden_key, "t": run.run_at})
    engine.dispose()
    from replay.history.queries import golden_history
    from replay.history.store import GoldenSelector

    with HistoryStore.open(history_url) as store:
        runs = store.list_runs()
        doc = golden_history(store, GoldenSelector("a" * 12))
    assert sorted(r["run_id"] for r in runs) == sorted("report:" + r.report_sha256 for r in (a, b))
    assert len({r["flags_sha256"] for r in runs}) == 1 and '"port"' not in runs[0]["flags"]
    flaky = next(r for r in doc["requests"] if r["id"] == "g0/b0/t1")
    assert flaky["flaky"] is True


def test_a_bad_port_or_scheme_or_an_empty_location_is_a_usage_error():
    for where, why in (("postgresql://u@h:99999/db", "port 99999"),
                       ("postgresql://u@h:abc/db", "is its port a number"),
                       ("mysql://u:pw@h/db", "unsupported history URL"), (" ", "empty")):
        with pytest.raises(UsageError, match=why) as exc:
            locate(where)
        assert "pw" not in str(exc.value)


def test_a_refused_connection_is_named_and_shows_no_form_of_a_password():
    from tests.support.postgres import free_port

    url = (f"postgresql://golden:s3cret1@127.0.0.1:{free_port()}/nothing?password=s3cret2"
           "&sslpassword=s3cret3&passfile=/home/ci/s3cret4")
    with pytest.raises(HistoryUnreachable) as exc:
        HistoryStore.open(url)
    message = one_line(exc)
    assert "s3cret" not in message and "127.0.0.1" in message


def test_a_lock_held_past_the_lock_timeout_is_a_named_one_line_error(history_url, monkeypatch):
    """Another writer holds the history: the add waits its timeout, then says so."""
    import replay.history.database as database

    monkeypatch.setattr(database, "LOCK_SECONDS", 1)
    monkeypatch.setattr(database, "BUSY_SECONDS", 1)
    HistoryStore.open(history_url).close()
    holder = raw(history_url)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with holder.connect() as conn:
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                conn.exec_driver_sql("BEGIN")
                conn.exec_driver_sql("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
            held.set()
            release.wait(30)
            conn.exec_driver_sql("ROLLBACK")

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(30)
        with HistoryStore.open(history_url) as store, pytest.raises(HistoryTimeout) as exc:
            store.add(records(run_report()))
        assert "nothing added" in one_line(exc) and "1 s" in str(exc.value)
    finally:
        release.set()
        thread.join(30)
        holder.dispose()
