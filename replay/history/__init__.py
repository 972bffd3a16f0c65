"""The results history: every report kept in one database (SQLite file or PostgreSQL), queried
per golden over time and server versions (docs/history.md)."""

HISTORY_ENV = "GOLDEN_HISTORY"  # a database URL or a file path: every report written is added
