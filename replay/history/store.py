"""The history store: add runs (each report in one transaction, all or nothing), list them,
and read one golden's runs and outcomes for the queries (replay/history/queries.py).

    with HistoryStore.open("history.sqlite") as store:
        store.add(records(doc))
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from replay.history.database import locate, open_engine, writer
from replay.history.ingest import NotAReport, RunRecord
from replay.history.schema import NONE, hit_tallies, outcomes, request_tallies, runs

HEX = re.compile(r"^[0-9a-fA-F]+$")
RUN_COLUMNS = ("id", "run_id", "golden_key", "golden_name", "verdict", "error", "run_at",
               "server", "server_version", "api", "model", "flags_sha256", "flags", "profile",
               "client", "numerics_sha256", "policy", "shard", "merged", "requests",
               "requests_failed", "repeats", "tokens_compared")


@dataclass(frozen=True)
class Added:
    """What one `add` did: new runs, and reports the history already held."""

    added: int
    duplicates: int


@dataclass(frozen=True)
class GoldenSelector:
    """Which golden `show`, `page` and `--golden` mean. A golden directory gives its content
    digest (`digest`): exactly the runs of that content. Otherwise `text` is a digest prefix
    (8+ hex digits) when runs are keyed by such a digest, else the name reports give the golden
    (its path, or the last part of it); a name may match several goldens (commands.py says so)."""

    text: str
    digest: str | None = None  # a golden directory's content digest: its runs, and no others

    def by_digest(self) -> Any:
        """The SQL condition for the runs keyed by this digest or digest prefix (None: the
        text is not a digest)."""
        from sqlalchemy import or_

        keys = runs.c.golden_key
        if self.digest:
            return keys == self.digest
        t = self.text.strip().lower()
        if len(t) >= 8 and HEX.match(t):
            return or_(*(keys.startswith(p + t, autoescape=True) for p in ("", "meta:", "name:")))
        return None

    def by_name(self) -> Any:
        """The SQL condition for the runs whose golden has this name: the path as given (also
        when reports name it from another directory), or, given a bare name, any path ending
        in it."""
        from sqlalchemy import false, or_

        t = self.text.strip().rstrip("/")
        if not t:
            return false()
        names = runs.c.golden_name
        return or_(names == t, names == t + "/", names.endswith("/" + t, autoescape=True))


def now_utc() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class HistoryStore:
    def __init__(self, engine: Any, where: str) -> None:
        self.engine = engine
        self.place = locate(where)
        self.where = self.place.shown  # never a secret: messages and the page show it

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
        report at the same moment). The tallies are updated in the same transaction, in one
        fixed key order, so that concurrent writers never deadlock on them."""
        from sqlalchemy.exc import SQLAlchemyError

        new: list[RunRecord] = []
        try:
            with writer(self.engine).begin() as conn:
                new = [record for record in batch if self._insert(conn, record)]
                upsert_tallies(conn, new)
        except SQLAlchemyError as exc:
            raise self.place.failure(exc, "nothing added") from None
        return Added(added=len(new), duplicates=len(batch) - len(new))

    def _insert(self, conn: Any, record: RunRecord) -> bool:
        row = {k: v for k, v in vars(record).items() if k != "outcomes"}  # not asdict: slow
        row["added_at"] = now_utc()
        row["run_at"] = record.run_at or row["added_at"]
        insert = _dialect_insert(conn)(runs).values(**row)
        insert = insert.on_conflict_do_nothing()  # the same report, or the same run, is here
        run_id = conn.execute(insert.returning(runs.c.id)).scalar()
        if run_id is None:
            self._check_same_report(conn, record)
            return False
        if record.outcomes:
            same = {"run_id": run_id, "golden_key": record.golden_key, "run_at": row["run_at"]}
            conn.execute(outcomes.insert(), [{**same, **vars(o)} for o in record.outcomes])
        return True

    @staticmethod
    def _check_same_report(conn: Any, record: RunRecord) -> None:
        """A run already held must be this very report: a run id the history holds with
        other content (an edited copy of a report) is refused, the whole batch with it."""
        from sqlalchemy import select

        held = conn.execute(select(runs.c.report_sha256).where(runs.c.run_id == record.run_id)
                            ).scalar()
        if held is not None and held != record.report_sha256:
            raise NotAReport(f"run {record.run_id} is in the history already, with other "
                             "content (an edited copy of its report?): nothing added")

    def prune(self, before: datetime) -> int:
        """Delete the runs from before `before` (UTC) with their outcomes, and recount the
        tallies of the goldens they belonged to; the number of runs deleted."""
        from sqlalchemy import delete, select
        from sqlalchemy.exc import SQLAlchemyError

        old = runs.c.run_at < before
        try:
            with writer(self.engine).begin() as conn:
                keys = sorted(conn.execute(select(runs.c.golden_key).where(old).distinct())
                              .scalars())
                conn.execute(delete(outcomes).where(
                    outcomes.c.run_id.in_(select(runs.c.id).where(old))))
                deleted = conn.execute(delete(runs).where(old)).rowcount
                recount_tallies(conn, keys)
        except SQLAlchemyError as exc:
            raise self.place.failure(exc, "nothing deleted") from None
        return int(deleted)

    # -- reading ------------------------------------------------------------------------------

    def list_runs(self, *, limit: int | None = None,
                  keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Runs, newest first (as dicts of RUN_COLUMNS), of these golden keys (None: all)."""
        from sqlalchemy import select

        query = select(*(runs.c[name] for name in RUN_COLUMNS)).order_by(
            runs.c.run_at.desc(), runs.c.id.desc())
        if keys is not None:
            query = query.where(runs.c.golden_key.in_(list(keys)))
        if limit is not None:
            query = query.limit(limit)
        return self.rows(query)

    def golden_names(self, condition: Any) -> dict[str, list[str]]:
        """The golden keys (content digests) of the runs a condition picks, each with the
        names its runs gave it."""
        from sqlalchemy import select

        found: dict[str, list[str]] = {}
        for r in self.rows(select(runs.c.golden_key, runs.c.golden_name).where(condition)
                           .distinct().order_by(runs.c.golden_key, runs.c.golden_name)):
            found.setdefault(r["golden_key"], []).append(r["golden_name"])
        return found

    def golden_runs(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        """The runs of these golden keys, oldest first."""
        from sqlalchemy import select

        return self.rows(select(*(runs.c[name] for name in RUN_COLUMNS))
                         .where(runs.c.golden_key.in_(list(keys)))
                         .order_by(runs.c.run_at, runs.c.id))

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
            raise self.place.failure(exc) from None

    def counts(self) -> tuple[int, int]:
        """(runs, outcomes) held."""
        from sqlalchemy import func, select

        with self.engine.connect() as conn:
            return (int(conn.execute(select(func.count()).select_from(runs)).scalar_one()),
                    int(conn.execute(select(func.count()).select_from(outcomes)).scalar_one()))

def upsert_tallies(conn: Any, added: Sequence[RunRecord]) -> None:
    """Add the runs' outcomes to the running tallies (schema.py)."""
    requests: Counter[tuple[Any, ...]] = Counter()
    passes: Counter[tuple[Any, ...]] = Counter()
    hits: Counter[tuple[Any, ...]] = Counter()
    for run in added:
        for o in run.outcomes:
            key = (run.golden_key, o.request_id, run.server_version, run.flags_sha256, o.status,
                   NONE if o.divergence_position is None else o.divergence_position)
            requests[key] += 1
            passes[key] += int(o.passed)
            hits[(run.golden_key, run.server_version,
                  NONE if o.cached_tokens is None else o.cached_tokens, o.tiers or "")] += 1
    insert = _dialect_insert(conn)
    for table, tally, columns in (
            (request_tallies, requests, ("golden_key", "request_id", "server_version",
                                         "flags_sha256", "status", "divergence_position")),
            (hit_tallies, hits, ("golden_key", "server_version", "cached_tokens", "tiers"))):
        if not tally:
            continue
        rows = [{**dict(zip(columns, key)), "n": n,
                 **({"passes": passes[key]} if table is request_tallies else {})}
                for key, n in sorted(tally.items())]  # one lock order for every writer
        stmt = insert(table)
        sums = {"n": table.c.n + stmt.excluded.n}
        if table is request_tallies:
            sums["passes"] = table.c.passes + stmt.excluded.passes
        conn.execute(stmt.on_conflict_do_update(index_elements=list(columns), set_=sums), rows)


def recount_tallies(conn: Any, keys: Sequence[str]) -> None:
    """The tallies of these goldens counted again from their outcomes."""
    from sqlalchemy import case, delete, func, select

    keys = list(keys)
    if not keys:
        return
    for table in (request_tallies, hit_tallies):
        conn.execute(delete(table).where(table.c.golden_key.in_(keys)))
    joined = outcomes.join(runs, runs.c.id == outcomes.c.run_id)
    mine = outcomes.c.golden_key.in_(keys)
    group = (outcomes.c.golden_key, outcomes.c.request_id, runs.c.server_version,
             runs.c.flags_sha256, outcomes.c.status,
             func.coalesce(outcomes.c.divergence_position, NONE))
    conn.execute(request_tallies.insert().from_select(
        [c.name for c in request_tallies.c],
        select(*group, func.count(), func.sum(case((outcomes.c.passed, 1), else_=0)))
        .select_from(joined).where(mine).group_by(*group)))
    group = (outcomes.c.golden_key, runs.c.server_version,
             func.coalesce(outcomes.c.cached_tokens, NONE), func.coalesce(outcomes.c.tiers, ""))
    conn.execute(hit_tallies.insert().from_select(
        [c.name for c in hit_tallies.c],
        select(*group, func.count()).select_from(joined).where(mine).group_by(*group)))


def _dialect_insert(conn: Any) -> Any:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert
