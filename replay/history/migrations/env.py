"""Alembic's environment for the history: migrations run on the connection that
replay/history/database.py hands over (in its transaction, under its lock)."""

from alembic import context

from replay.history.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
