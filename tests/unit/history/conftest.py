from tests.support.postgres import history_url, postgres  # noqa: F401 - fixtures
