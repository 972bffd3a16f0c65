"""repro.sh's words in-process (replay/jobs/minimize/repro_script.py); the scripts run by a real
`sh`, hostile strings and secrets included: tests/integration/test_repro_sh.py."""

from __future__ import annotations

import pytest

from replay.jobs.minimize.repro_script import Secret


def test_a_secret_env_name_must_be_a_variable_name():
    with pytest.raises(ValueError):
        Secret("x", "A; rm -rf /", "bad")
