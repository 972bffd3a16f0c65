"""Where the history lives: a URL (or a file path) to a SQLAlchemy engine whose tables are
migrated to the newest schema on first use.

- A plain path or `sqlite:///PATH`: a SQLite file (nothing to run), in WAL mode. A transaction
  that writes begins with `BEGIN IMMEDIATE` and waits up to `BUSY_SECONDS` for another writer,
  so several processes can add at once; readers never see half a run.
- `postgresql://...` (or `postgres://`): PostgreSQL through psycopg 3. Migrations run under a
  transaction-scoped advisory lock, so CI shards that open a fresh database at once migrate it
  once.
Secrets in a URL (a password) never appear in a message: `safe_url` hides them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.utils.errors import GoldenError, UsageError

BUSY_SECONDS = 60
MIGRATION_LOCK = 0x676F6C64  # pg_advisory_xact_lock key ("gold")
MIGRATIONS = Path(__file__).parent / "migrations"
WRITING = "history_writing"  # execution option of a transaction that writes


class HistoryError(GoldenError):
    """The history database cannot be used (unreachable, refused, not a history)."""


def engine_url(where: str) -> str:
    """The SQLAlchemy URL for a history location: a path, `sqlite:///...` or a PostgreSQL URL."""
    text = where.strip()
    if not text:
        raise UsageError("the history location is empty: give a file path or a database URL")
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if text.startswith(prefix):
            return "postgresql+psycopg://" + text[len(prefix):]
    if text.startswith("sqlite:///"):
        return text
    if "://" in text:
        raise UsageError(f"unsupported history URL {safe_url(text)!r}: use a file path, "
                         "sqlite:///PATH or postgresql://USER@HOST/DB")
    return f"sqlite:///{Path(text).expanduser()}"


def safe_url(where: str) -> str:
    """The location without a password."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(where).render_as_string(hide_password=True)
    except ArgumentError:
        return where if "@" not in where else "<unparseable URL>"


def open_engine(where: str) -> Any:
    """An engine on the history at `where`, migrated to the newest schema."""
    try:
        import alembic  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"the results history needs its extra: pip install "
                         f"'golden-replay[history]' ({exc.name} is missing)") from None
    from sqlalchemy import create_engine, event
    from sqlalchemy.exc import SQLAlchemyError

    url = engine_url(where)
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        if not path.parent.is_dir():
            raise UsageError(f"cannot create the history {path}: {path.parent} is not a directory")
        engine = create_engine(url, connect_args={"timeout": BUSY_SECONDS})

        @event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, record: Any) -> None:
            dbapi_connection.isolation_level = None  # transactions are ours, not the driver's
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            dbapi_connection.execute("PRAGMA foreign_keys=ON")

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:  # a writer takes the write lock at once: no upgrade race
            writing = conn.get_execution_options().get(WRITING, False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if writing else "BEGIN")
    else:
        engine = create_engine(url, pool_pre_ping=True)
    try:
        migrate(engine)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise HistoryError(f"history {safe_url(url)}: {first_line(exc)}") from None
    return engine


def first_line(exc: BaseException) -> str:
    from sqlalchemy.exc import DBAPIError

    inner = exc.orig if isinstance(exc, DBAPIError) else exc  # the driver's own message
    text = str(inner).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def alembic_config(connection: Any = None) -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return str(ScriptDirectory.from_config(alembic_config()).get_current_head())


def current_revision(connection: Any) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def writer(engine: Any) -> Any:
    """The engine for transactions that write (SQLite: `BEGIN IMMEDIATE`)."""
    return engine.execution_options(**{WRITING: True})


def migrate(engine: Any) -> None:
    """Upgrade the database to the newest schema (nothing to do: one cheap query)."""
    from alembic import command

    head = head_revision()
    with engine.connect() as conn:
        if current_revision(conn) == head:
            return
    with writer(engine).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        if current_revision(conn) != head:  # another process may have migrated meanwhile
            command.upgrade(alembic_config(conn), "head")
