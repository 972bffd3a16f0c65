"""The first schema: runs, their per-request outcomes, and the running tallies.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("report_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("golden_key", sa.String(80), nullable=False),
        sa.Column("golden_name", sa.String(1000), nullable=False),
        sa.Column("verdict", sa.String(8), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("run_at", sa.DateTime, nullable=False),
        sa.Column("added_at", sa.DateTime, nullable=False),
        sa.Column("server", sa.String(1000), nullable=False),
        sa.Column("server_version", sa.String(200), nullable=False),
        sa.Column("api", sa.String(40)),
        sa.Column("model", sa.String(1000)),
        sa.Column("tool", sa.String(200)),
        sa.Column("flags_sha256", sa.String(64), nullable=False),
        sa.Column("flags", sa.Text, nullable=False),
        sa.Column("numerics_sha256", sa.String(64), nullable=False),
        sa.Column("numerics", sa.Text, nullable=False),
        sa.Column("policy", sa.String(200)),
        sa.Column("expect_cache", sa.String(200)),
        sa.Column("shard", sa.String(40)),
        sa.Column("merged", sa.Boolean, nullable=False),
        sa.Column("requests", sa.Integer, nullable=False),
        sa.Column("requests_failed", sa.Integer, nullable=False),
        sa.Column("repeats", sa.Integer, nullable=False),
        sa.Column("tokens_compared", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_runs_golden_time", "runs", ["golden_key", "run_at"])
    op.create_index("ix_runs_time", "runs", ["run_at"])
    op.create_index("ix_runs_version", "runs", ["server_version"])
    op.create_table(
        "outcomes",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("request_id", sa.String(200), nullable=False),
        sa.Column("repeat", sa.Integer, nullable=False),
        sa.Column("status", sa.String(40), nullable=False),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("cached_tokens", sa.Integer),
        sa.Column("tiers", sa.Text),
        sa.Column("expected_min_cached", sa.Integer),
        sa.Column("cache_problem", sa.Text),
        sa.Column("tokens_compared", sa.Integer),
        sa.Column("max_ulp", sa.BigInteger),
        sa.Column("mean_kl", sa.Float),
        sa.Column("divergence_position", sa.Integer),
        sa.Column("divergence_kind", sa.String(20)),
        sa.Column("token_divergence_position", sa.Integer),
        sa.Column("golden_key", sa.String(80), nullable=False),
        sa.Column("run_at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_outcomes_sequence", "outcomes",
                    ["golden_key", "request_id", "run_at", "run_id", "position", "passed"])
    op.create_table(
        "request_tallies",
        sa.Column("golden_key", sa.String(80), primary_key=True),
        sa.Column("request_id", sa.String(200), primary_key=True),
        sa.Column("server_version", sa.String(200), primary_key=True),
        sa.Column("flags_sha256", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(40), primary_key=True),
        sa.Column("divergence_position", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("n", sa.BigInteger, nullable=False),
        sa.Column("passes", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "hit_tallies",
        sa.Column("golden_key", sa.String(80), primary_key=True),
        sa.Column("server_version", sa.String(200), primary_key=True),
        sa.Column("cached_tokens", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("tiers", sa.String(1000), primary_key=True),
        sa.Column("n", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("hit_tallies")
    op.drop_table("request_tallies")
    op.drop_table("outcomes")
    op.drop_table("runs")
