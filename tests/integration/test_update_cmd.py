"""`golden update` with a launched reference server (a fake one, started and stopped)."""

from __future__ import annotations

from typer.testing import CliRunner

from tests.data.fake_servers.helpers import fake_profile
from tests.unit.jobs.test_update import goldens, update_app  # noqa: F401 - a fixture

runner = CliRunner()


def test_cli_with_a_launched_reference(goldens, tmp_path):
    d, _, _ = goldens
    profile = fake_profile(tmp_path, "healthy_stub.py", name="ref", args=("--no-radix",))
    result = runner.invoke(update_app(), ["update", str(d), "--launch", profile, "--log-dir",
                                          str(tmp_path / "logs"), "-q"])
    assert result.exit_code == 0, result.output
    assert "2 golden(s): 0 changed and replaced, 2 unchanged, 0 error(s)" in result.output
    assert (tmp_path / "logs" / "ref.log").exists()
