"""Runs get an identity of their own and servers a flags key of their settings only.

- `runs.run_id` (unique): the report's run id; the runs already held get "report:" + their
  report_sha256, which was their identity until now.
- `runs.profile`, `runs.client`: the launch profile and the client settings.
- `runs.flags` / `flags_sha256`: the identifying settings only (replay/history/identity.py),
  recomputed from the whole `server_info` kept so far, and the request tallies (keyed by the
  flags key) counted again.
No table is rebuilt (SQLite's batch mode would drop `runs`, and its outcomes with it): the new
column is added NOT NULL with a default that is then filled in.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

import json

import sqlalchemy as sa
from alembic import op

from replay.history.identity import server_flags
from replay.history.ingest import canonical, sha256
from replay.history.store import recount_tallies

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    op.add_column("runs", sa.Column("run_id", sa.String(80), nullable=False, server_default=""))
    op.add_column("runs", sa.Column("profile", sa.String(200)))
    op.add_column("runs", sa.Column("client", sa.Text))
    conn.execute(sa.text("UPDATE runs SET run_id = 'report:' || report_sha256"))
    if conn.dialect.name == "postgresql":
        op.alter_column("runs", "run_id", server_default=None)
    op.create_index("ix_runs_run_id", "runs", ["run_id"], unique=True)
    for run_id, flags in conn.execute(sa.text("SELECT id, flags FROM runs")).all():
        try:
            info = json.loads(flags)
        except ValueError:
            info = {}
        kept = canonical(server_flags(info if isinstance(info, dict) else {}))
        conn.execute(sa.text("UPDATE runs SET flags = :f, flags_sha256 = :h WHERE id = :i"),
                     {"f": kept, "h": sha256(kept), "i": run_id})
    keys = sorted(conn.execute(sa.text("SELECT DISTINCT golden_key FROM runs")).scalars())
    recount_tallies(conn, keys)


def downgrade() -> None:
    op.drop_index("ix_runs_run_id", "runs")
    op.drop_column("runs", "client")
    op.drop_column("runs", "profile")
    op.drop_column("runs", "run_id")
