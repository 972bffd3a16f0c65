"""Where the history lives: a URL (or a file path) to a SQLAlchemy engine on a database that is
checked to be a history (or empty) and then migrated to the newest schema.

- A plain path or `sqlite:///PATH`: a SQLite file (nothing to run), in WAL mode. A transaction
  that writes begins with `BEGIN IMMEDIATE` and waits up to `BUSY_SECONDS` for another writer,
  so several processes can add at once; readers never see half a run.
- `postgresql://...` (or `postgres://`): PostgreSQL through psycopg 3, with a connect timeout
  (a host that accepts and never answers), a statement timeout and a lock timeout, unless the
  URL sets them itself (`connect_timeout=`, `options=`). Migrations run under a transaction-scoped
  advisory lock, so CI shards that open a fresh database at once migrate it once.

Before anything is written, the database is looked at: one that holds tables but is not a
history (another application's, or a file that is not SQLite) is refused and left as it was,
and a history of a newer schema than this golden-replay knows is refused too. Every failure is
a `HistoryError` subclass saying in one line what went wrong, with the location shown without
its secrets (replay/utils/redact.py knows every form: `user:pw@`, `password=`, `sslpassword=`,
`passfile=`, API keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay.utils.errors import GoldenError, UsageError
from replay.utils.redact import location_secrets, redact_text, scrub

BUSY_SECONDS = 60  # SQLite: how long a writer waits for another one
CONNECT_SECONDS = 10  # PostgreSQL: connecting, authentication included
STATEMENT_SECONDS = 300  # PostgreSQL: one statement
LOCK_SECONDS = 60  # PostgreSQL: waiting for a lock (another writer, a migration, a prune)
MIGRATION_LOCK = 0x676F6C64  # pg_advisory_xact_lock key ("gold")
MIGRATIONS = Path(__file__).parent / "migrations"
WRITING = "history_writing"  # execution option of a transaction that writes
VERSION_TABLE = "alembic_version"
SQLITE = "sqlite:///"


class HistoryError(GoldenError):
    """The history database cannot be used (exit 2). Its message never holds a secret."""

    def __init__(self, message: str) -> None:
        super().__init__(redact_text(" ".join(str(message).split())))


class HistoryUnreachable(HistoryError):
    """The database cannot be reached or refused the connection or a statement."""


class HistoryTimeout(HistoryError):
    """Connecting, a statement or a lock took longer than its timeout."""


class NotAHistory(HistoryError):
    """The database holds something else: nothing was written into it."""


class NewerHistory(HistoryError):
    """The history was written by a newer golden-replay (a schema this one does not know)."""


@dataclass(frozen=True)
class Location:
    """A history location: its SQLAlchemy URL, how messages show it, the secrets it holds."""

    url: str
    shown: str
    secrets: tuple[str, ...]

    @property
    def sqlite_path(self) -> Path | None:
        return Path(self.url[len(SQLITE):]) if self.url.startswith(SQLITE) else None

    def error(self, kind: type[HistoryError], text: str) -> HistoryError:
        return kind(f"history {self.shown}: {scrub(text, self.secrets)}")

    def failure(self, exc: BaseException, doing: str = "") -> HistoryError:
        """The one-line error for a database exception (`doing`: what did not happen)."""
        kind, text = classify(exc)
        return self.error(kind, f"{doing}{': ' if doing else ''}{text}")


def locate(where: str) -> Location:
    """A history location from a path, `sqlite:///...` or a PostgreSQL URL. An empty one, an
    unsupported scheme or a port that is no port is a UsageError."""
    text = where.strip()
    if not text:
        raise UsageError("the history location is empty (an unset variable?): give a file path "
                         "or a database URL")
    secrets = location_secrets(text)
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if text.startswith(prefix):
            url = "postgresql+psycopg://" + text[len(prefix):]
            _check_port(url, secrets)
            return Location(url, redact_text(url), secrets)
    if text.startswith(SQLITE):
        return Location(text, redact_text(text), secrets)
    if "://" in text:
        raise UsageError(f"unsupported history URL {scrub(redact_text(text), secrets)!r}: use a "
                         "file path, sqlite:///PATH or postgresql://USER@HOST/DB")
    url = f"{SQLITE}{Path(text).expanduser()}"
    return Location(url, redact_text(url), secrets)


def engine_url(where: str) -> str:
    """The SQLAlchemy URL for a history location."""
    return locate(where).url


def safe_url(where: str) -> str:
    """The location as messages and pages show it: without any secret."""
    return locate(where).shown


def _check_port(url: str, secrets: tuple[str, ...]) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    shown = scrub(redact_text(url), secrets)
    try:
        port = make_url(url).port
    except (ArgumentError, ValueError):
        raise UsageError(f"the history URL {shown!r} is not a valid URL (is its port a "
                         "number?)") from None
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"the history URL {shown!r} names port {port}: a port is 1 to 65535")


def open_engine(where: str) -> Any:
    """An engine on the history at `where`: checked to be a history (or empty) and migrated to
    the newest schema."""
    try:
        import alembic  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"the results history needs its extra: pip install "
                         f"'golden-replay[history]' ({exc.name} is missing)") from None
    from sqlalchemy.exc import SQLAlchemyError

    place = locate(where)
    engine = _sqlite_engine(place) if place.sqlite_path else _postgres_engine(place)
    try:
        migrate(engine, place)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise place.failure(exc) from None
    except HistoryError:
        engine.dispose()
        raise
    return engine


def _sqlite_engine(place: Location) -> Any:
    from sqlalchemy import create_engine, event

    path = place.sqlite_path
    assert path is not None
    if not path.parent.is_dir():
        raise UsageError(f"cannot create the history {path}: {path.parent} is not a directory")
    engine = create_engine(place.url, connect_args={"timeout": BUSY_SECONDS})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # transactions are ours, not the driver's
        dbapi_connection.execute("PRAGMA foreign_keys=ON")

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:  # a writer takes the write lock at once: no upgrade race
        writing = conn.get_execution_options().get(WRITING, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writing else "BEGIN")

    return engine


def _postgres_engine(place: Location) -> Any:
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    given = make_url(place.url).query
    args: dict[str, Any] = {}
    if "connect_timeout" not in given:
        args["connect_timeout"] = CONNECT_SECONDS
    if "options" not in given:
        args["options"] = (f"-c statement_timeout={STATEMENT_SECONDS * 1000} "
                           f"-c lock_timeout={LOCK_SECONDS * 1000}")
    return create_engine(place.url, pool_pre_ping=True, connect_args=args)


def classify(exc: BaseException) -> tuple[type[HistoryError], str]:
    """Which history error a database exception is, and its one line."""
    text = first_line(exc)
    low = text.lower()
    if "statement timeout" in low:
        return HistoryTimeout, (f"a statement ran past the {STATEMENT_SECONDS} s statement "
                                f"timeout ({text})")
    if "lock timeout" in low:
        return HistoryTimeout, (f"waited past the {LOCK_SECONDS} s lock timeout for another "
                                f"writer ({text})")
    if "database is locked" in low:
        return HistoryTimeout, f"waited {BUSY_SECONDS} s for another writer ({text})"
    if "timeout expired" in low or "timed out" in low:
        return HistoryTimeout, (f"no answer within the connect timeout ({CONNECT_SECONDS} s "
                                f"unless the URL sets connect_timeout): {text}")
    if "file is not a database" in low:
        return NotAHistory, f"not a SQLite database, so not a history ({text})"
    return HistoryUnreachable, text


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


def revisions() -> tuple[str, list[str]]:
    """(the newest schema revision, every revision this golden-replay knows)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return str(script.get_current_head()), [r.revision for r in script.walk_revisions()]


def head_revision() -> str:
    return revisions()[0]


def current_revision(connection: Any) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def writer(engine: Any) -> Any:
    """The engine for transactions that write (SQLite: `BEGIN IMMEDIATE`)."""
    return engine.execution_options(**{WRITING: True})


def check_is_history(conn: Any, place: Location, known: list[str]) -> str | None:
    """The database's schema revision (None: empty, a new history), or a refusal when it holds
    something that is not a history this golden-replay can read."""
    from sqlalchemy import inspect

    tables = sorted(inspect(conn).get_table_names())
    if not tables:
        return None
    if VERSION_TABLE not in tables:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise place.error(NotAHistory, f"the database holds other tables ({shown}) and is not a "
                          "golden-replay history: nothing was written (give a new file or an "
                          "empty database)")
    revision = current_revision(conn)
    if revision is not None and revision not in known:
        if "runs" in tables:
            raise place.error(NewerHistory, f"written by a newer golden-replay (schema revision "
                              f"{revision!r:.40}; this one knows up to {known[0]!r}): upgrade "
                              "golden-replay to use it")
        raise place.error(NotAHistory, f"its {VERSION_TABLE} names revision {revision!r:.40}, "
                          "not a golden-replay history's: nothing was written")
    return revision


def migrate(engine: Any, place: Location) -> None:
    """Check that the database is a history (or empty), then upgrade it to the newest schema
    (nothing to do: two cheap queries). SQLite is switched to WAL only once it is ours."""
    from alembic import command

    head, known = revisions()
    with engine.connect() as conn:
        if check_is_history(conn, place, known) == head:
            return
    with writer(engine).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        if check_is_history(conn, place, known) != head:  # another process may have migrated
            command.upgrade(alembic_config(conn), "head")
    if engine.dialect.name == "sqlite":  # outside any transaction, as SQLite requires
        with engine.connect() as conn:
            conn.connection.driver_connection.execute("PRAGMA journal_mode=WAL")
