"""The results history: every report kept in one database (SQLite file or PostgreSQL), queried
per golden over time and server versions (docs/history.md)."""
