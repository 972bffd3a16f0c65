"""replay/utils/redact.py: the one place that knows every form a secret takes, in URLs,
database locations, launch commands and headers."""

from __future__ import annotations

import pytest

from replay.utils.redact import location_secrets, redact_text, scrub

FORMS = [
    ("postgresql://ci:hunter2@db.lab:5432/golden", "user:password@"),
    ("postgresql://ci@db.lab/golden?password=hunter2&sslmode=require", "?password="),
    ("postgresql://ci@db.lab/golden?sslmode=require&sslpassword=hunter2", "&sslpassword="),
    ("postgresql://ci@db.lab/golden?passfile=/home/ci/hunter2.pgpass", "passfile="),
    ("host=db.lab user=ci password=hunter2 dbname=golden", "libpq keywords"),
    ("host=db.lab password='hunter2 with spaces' dbname=golden", "a quoted keyword"),
    ("http://h200:30000/v1?api_key=hunter2", "an API key in a query"),
    ("golden replay g.zarr --api-key hunter2", "an API key flag"),
    ("Authorization: Bearer hunter2", "a bearer token"),
]


@pytest.mark.parametrize("text, form", FORMS, ids=[f for _, f in FORMS])
def test_every_form_of_a_secret_is_redacted(text, form):
    shown = redact_text(text)
    assert "hunter2" not in shown and "<redacted>" in shown


@pytest.mark.parametrize("text, form", FORMS[:7], ids=[f for _, f in FORMS[:7]])
def test_a_location_s_secret_values_are_found_to_scrub_wherever_they_are_echoed(text, form):
    """A driver may echo the value alone (the password, the password file's path)."""
    value = next(v for v in location_secrets(text) if "hunter2" in v)
    echoed = f"the server said: no access with {value}"
    assert "hunter2" not in scrub(echoed, location_secrets(text))


def test_what_is_no_secret_is_left_as_it_is():
    text = "postgresql://db.lab:5432/golden?sslmode=require&connect_timeout=5 page_size=16"
    assert redact_text(text) == text and location_secrets(text) == ()


def test_a_user_name_alone_is_hidden_too_it_may_be_a_token():
    assert redact_text("https://ghp_hunter2@github.com/x") == "https://<redacted>@github.com/x"
