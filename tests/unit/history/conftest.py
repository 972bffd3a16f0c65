from pathlib import Path

import pytest


@pytest.fixture
def history_url(tmp_path: Path) -> str:
    """An empty history: a SQLite file here (in-process); the same tests run on a real
    PostgreSQL in tests/integration/test_history_postgres.py."""
    return str(tmp_path / "history.sqlite")
