"""The history store: add runs (each report in one transaction, all or nothing), list them,
and read one golden's runs and outcomes for the queries (replay/history/queries.py).

    with HistoryStore.open("history.sqlite") as store:
        store.add(records(doc))
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from replay.history.database import HistoryError, first_line, open_engine, safe_url, writer
from replay.history.ingest import RunRecord
from replay.history.schema import outcomes, runs

HEX = re.compile(r"^[0-9a-fA-F]+$")
RUN_COLUMNS = ("id", "golden_key", "golden_name", "verdict", "error", "run_at", "server",
               "server_version", "api", "model", "flags_sha256", "numerics_sha256", "policy",
               "shard", "merged", "requests", "requests_failed", "repeats", "tokens_compared")


@dataclass(frozen=True)
class Added:
    """What one `add` did: new runs, and reports the history already held."""

    added: int
    duplicates: int


@dataclass(frozen=True)
class GoldenSelector:
    """Which golden `show` and `page` mean: a content-digest prefix, or the name reports give
    it (its path, or only the last part of the path), or a golden directory's own digest."""

    text: str
    digest: str | None = None  # from a golden directory that was given
    exact: bool = False  # only the runs keyed by `digest` (the page's one section per golden)

    def where(self) -> Any:
        """The SQL condition on `runs` that picks this golden's runs."""
        from sqlalchemy import false, or_

        t = self.text.strip().rstrip("/")
        base = t.rsplit("/", 1)[-1]
        keys, conds = runs.c.golden_key, []
        if self.digest:
            conds.append(keys == self.digest)
        if not self.exact:
            if len(t) >= 8 and HEX.match(t):
                conds += [keys.startswith(p + t.lower(), autoescape=True)
                          for p in ("", "meta:", "name:")]
            if base:
                names = runs.c.golden_name
                conds += [names == t, names == base,
                          names.endswith("/" + base, autoescape=True)]
        return or_(*conds) if conds else false()


def now_utc() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class HistoryStore:
    def __init__(self, engine: Any, where: str) -> None:
        self.engine = engine
        self.where = safe_url(where)

    @classmethod
    def open(cls, where: str) -> "HistoryStore":
        return cls(open_engine(where), where)

    def __enter__(self) -> "HistoryStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    # -- writing ------------------------------------------------------------------------------

    def add(self, batch: Sequence[RunRecord]) -> Added:
        """Add every run in one transaction: all of them or (on any failure) none. A run whose
        report the history holds already is skipped (also when another process adds the same
        report at the same moment)."""
        from sqlalchemy.exc import SQLAlchemyError

        added = 0
        try:
            with writer(self.engine).begin() as conn:
                for record in batch:
                    added += self._insert(conn, record)
        except SQLAlchemyError as exc:
            raise HistoryError(f"history {self.where}: nothing added: {first_line(exc)}") from None
        return Added(added=added, duplicates=len(batch) - added)

    def _insert(self, conn: Any, record: RunRecord) -> int:
        row = {k: v for k, v in vars(record).items() if k != "outcomes"}  # not asdict: slow
        row["added_at"] = now_utc()
        row["run_at"] = record.run_at or row["added_at"]
        insert = _dialect_insert(conn)(runs).values(**row)
        insert = insert.on_conflict_do_nothing(index_elements=["report_sha256"])
        run_id = conn.execute(insert.returning(runs.c.id)).scalar()
        if run_id is None:
            return 0  # the same report is here already
        if record.outcomes:
            conn.execute(outcomes.insert(),
                         [{"run_id": run_id, **vars(o)} for o in record.outcomes])
        return 1

    # -- reading ------------------------------------------------------------------------------

    def list_runs(self, *, limit: int | None = None,
                  golden: GoldenSelector | None = None) -> list[dict[str, Any]]:
        """Runs, newest first (as dicts of RUN_COLUMNS)."""
        from sqlalchemy import select

        query = select(*(runs.c[name] for name in RUN_COLUMNS)).order_by(
            runs.c.run_at.desc(), runs.c.id.desc())
        if golden is not None:
            query = query.where(golden.where())
        if limit is not None:
            query = query.limit(limit)
        return self.rows(query)

    def golden_runs(self, golden: GoldenSelector) -> list[dict[str, Any]]:
        """The runs of one golden, oldest first."""
        return list(reversed(self.list_runs(golden=golden)))

    def outcomes_of(self, run_id: int) -> list[dict[str, Any]]:
        """The outcomes of one run, in report order."""
        from sqlalchemy import select

        return self.rows(select(outcomes).where(outcomes.c.run_id == run_id)
                         .order_by(outcomes.c.position))

    def rows(self, query: Any) -> list[dict[str, Any]]:
        """The rows of a query, as dicts."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.engine.connect() as conn:
                return [dict(r) for r in conn.execute(query).mappings()]
        except SQLAlchemyError as exc:
            raise HistoryError(f"history {self.where}: {first_line(exc)}") from None

    def counts(self) -> tuple[int, int]:
        """(runs, outcomes) held."""
        from sqlalchemy import func, select

        with self.engine.connect() as conn:
            return (int(conn.execute(select(func.count()).select_from(runs)).scalar_one()),
                    int(conn.execute(select(func.count()).select_from(outcomes)).scalar_one()))

def _dialect_insert(conn: Any) -> Any:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert
