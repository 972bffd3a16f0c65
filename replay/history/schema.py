"""The history's one schema, as SQLAlchemy Core tables (docs/history.md).

`runs`: one row per run (a replay of one golden against one server), keyed for queries by
the golden's content digest, the server's identity and version, its flags key (identity.py),
its numerics and the time. `outcomes`: one row per request and repeat of a run. A run is its
`run_id` (made when the run was made, in the report); `report_sha256` (of the document's
canonical JSON) only refuses the same report twice.

The tables are created and changed only by the Alembic migrations in migrations/versions/; a
test checks that the migrated database and these tables agree.
"""

from __future__ import annotations

from replay.utils.errors import UsageError

try:
    from sqlalchemy import (
        BigInteger, Boolean, Column, DateTime, Float, ForeignKey, Index, Integer, MetaData, String,
        Table, Text,
    )
except ImportError:  # the history is an optional extra: say how to get it, in one line
    raise UsageError("the results history needs its extra: pip install "
                     "'golden-replay[history]' (sqlalchemy is missing)") from None

metadata = MetaData()

runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("report_sha256", String(64), nullable=False, unique=True),
    Column("run_id", String(80), nullable=False),  # the report's `run_id` ("report:" + sha256 if none)
    Column("golden_key", String(80), nullable=False),  # content digest, else a fallback
    Column("golden_name", String(1000), nullable=False),  # the report's `golden` label
    Column("verdict", String(8), nullable=False),  # pass | fail | error
    Column("error", Text),
    Column("run_at", DateTime, nullable=False),  # UTC: when the replay server was asked
    Column("added_at", DateTime, nullable=False),  # UTC: when the run entered the history
    Column("server", String(1000), nullable=False),  # the report's `server` label
    Column("server_version", String(200), nullable=False),  # "unknown" when not reported
    Column("api", String(40)),
    Column("model", String(1000)),
    Column("tool", String(200)),
    Column("flags_sha256", String(64), nullable=False),  # the flags key: sha256 of `flags`
    Column("flags", Text, nullable=False),  # the identifying settings (identity.py), canonical JSON
    Column("profile", String(200)),  # the launch profile, None for a server given by URL
    Column("client", Text),  # the client settings (concurrency, schedule), canonical JSON
    Column("numerics_sha256", String(64), nullable=False),
    Column("numerics", Text, nullable=False),  # the replay side of report.numerics, JSON
    Column("policy", String(200)),
    Column("expect_cache", String(200)),
    Column("shard", String(40)),  # "i/n" for a shard's report
    Column("merged", Boolean, nullable=False),  # a `golden report --merge` document
    Column("requests", Integer, nullable=False),
    Column("requests_failed", Integer, nullable=False),
    Column("repeats", Integer, nullable=False),
    Column("tokens_compared", BigInteger, nullable=False),
    Index("ix_runs_golden_time", "golden_key", "run_at"),
    Index("ix_runs_time", "run_at"),
    Index("ix_runs_version", "server_version"),
    Index("ix_runs_run_id", "run_id", unique=True),
)

outcomes = Table(
    "outcomes", metadata,
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("position", Integer, primary_key=True),  # its place in the report's `requests`
    Column("request_id", String(200), nullable=False),
    Column("repeat", Integer, nullable=False),
    Column("status", String(40), nullable=False),
    Column("passed", Boolean, nullable=False),
    Column("cached_tokens", Integer),
    Column("tiers", Text),  # cached_tokens_details as canonical JSON, e.g. {"device": 640}
    Column("expected_min_cached", Integer),
    Column("cache_problem", Text),
    Column("tokens_compared", Integer),
    Column("max_ulp", BigInteger),  # null: infinite (or not reported)
    Column("mean_kl", Float),  # null: non-finite (or not reported)
    Column("divergence_position", Integer),  # first_divergence.position
    Column("divergence_kind", String(20)),  # token | logprob | top_k
    Column("token_divergence_position", Integer),
    Column("golden_key", String(80), nullable=False),  # the run's, for the sequence index
    Column("run_at", DateTime, nullable=False),  # the run's
    # each request's outcomes in time order, read without a sort (the flips)
    Index("ix_outcomes_sequence", "golden_key", "request_id", "run_at", "run_id", "position",
          "passed"),
)

# Running totals kept in step with every run added (same transaction), so that queries read
# a few rows per request and version instead of every outcome. NONE (-1, "") stands for null:
# a key column must compare equal to itself for the upsert to find its row.
NONE = -1
request_tallies = Table(
    "request_tallies", metadata,
    Column("golden_key", String(80), primary_key=True),
    Column("request_id", String(200), primary_key=True),
    Column("server_version", String(200), primary_key=True),
    Column("flags_sha256", String(64), primary_key=True),
    Column("status", String(40), primary_key=True),
    Column("divergence_position", Integer, primary_key=True, autoincrement=False),
    Column("n", BigInteger, nullable=False),  # outcomes
    Column("passes", BigInteger, nullable=False),  # of them passed
)

hit_tallies = Table(
    "hit_tallies", metadata,
    Column("golden_key", String(80), primary_key=True),
    Column("server_version", String(200), primary_key=True),
    Column("cached_tokens", Integer, primary_key=True, autoincrement=False),
    Column("tiers", String(1000), primary_key=True),
    Column("n", BigInteger, nullable=False),
)
