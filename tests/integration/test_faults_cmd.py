"""What a user can discover from the command line: `golden --version`, `golden faults`, and
`golden demo --fault F` choosing the profile the fault needs and refusing an unknown one before
any work."""

from __future__ import annotations

import time
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from cli.engine_cmds import demo_profile
from cli.main import app
from replay.engine.faults import FAULTS
from replay.jobs.detection import FAULT_PROFILES
from replay.utils.errors import UsageError
from tests.support.closed_pipe import into_closed_pipe

runner = CliRunner()


def test_version_prints_the_installed_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"golden-replay {version('golden-replay')}"


def test_faults_lists_every_fault_with_the_profile_it_needs():
    result = runner.invoke(app, ["faults"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()}
    assert sorted(lines) == sorted(FAULTS)
    assert "(profile hicache-write-back)" in lines["write-back-early-evict"]
    assert "(profile hicache)" in lines["late-ssm-checkpoint"]
    assert "needs a golden recorded with prompt_logprobs" in lines["prompt-logprobs-stale-buffer"]
    assert "needs a golden recorded with salted" in lines["cache-key-drops-extra-key"]


@pytest.mark.parametrize("fault", sorted(FAULT_PROFILES))
def test_demo_with_a_fault_replays_on_the_profile_that_fault_needs(fault):
    assert demo_profile(fault, None) == FAULT_PROFILES[fault]


def test_demo_without_a_fault_replays_on_hicache():
    assert demo_profile(None, None) == "hicache"


def test_demo_warns_when_the_asked_profile_cannot_reach_the_fault(capsys):
    assert demo_profile("write-back-early-evict", "hicache") == "hicache"
    assert "breaks a path of profile hicache-write-back" in capsys.readouterr().err


def test_demo_refuses_an_unknown_fault_before_any_work(tmp_path):
    started = time.monotonic()
    result = runner.invoke(app, ["demo", "--fault", "no-such-fault", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "unknown fault 'no-such-fault'" in result.output
    assert "golden faults" in result.output
    assert not (tmp_path / "o").exists()  # nothing recorded, nothing written
    assert time.monotonic() - started < 30


def test_demo_refuses_an_unknown_replay_profile_before_any_work(tmp_path):
    with pytest.raises(UsageError):
        demo_profile(None, "no-such-profile")


def test_a_reader_that_closed_the_pipe_ends_the_list_of_faults_quietly_with_exit_0():
    res = into_closed_pipe("faults")
    assert (res.returncode, res.stderr) == (0, "")
