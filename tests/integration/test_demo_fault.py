"""`golden demo --fault F`: the demo replays what the fault needs (detection.FAULT_SETUPS) and
catches it; an unknown fault is a usage error before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from typer.testing import CliRunner

from cli.main import app
from tests.support import paths

runner = CliRunner()


def test_an_unknown_fault_is_refused_before_anything_starts(tmp_path):
    result = runner.invoke(app, ["demo", "--fault", "no-such-fault", "--out", str(tmp_path), "-q"])
    assert result.exit_code == 2
    assert "unknown fault 'no-such-fault'" in result.output
    assert not (tmp_path / "logs").exists()


def test_demo_catches_the_prompt_logprob_fault_with_a_golden_that_asks_for_them(tmp_path):
    """ci-quick (group 2 asks for prompt logprobs) on a small pool: the stale rows show."""
    result = runner.invoke(app, ["demo", "--fault", "prompt-logprobs-stale-buffer",
                                 "--out", str(tmp_path), "-q"])
    assert result.exit_code == 1, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    statuses = {r["status"] for r in report["requests"] if not r["passed"]}
    assert statuses == {"prompt_logprob_drift"}
    assert (tmp_path / "ci-quick.zarr").is_dir()


def test_a_caught_fault_reads_whole_in_a_ci_log_of_80_columns(tmp_path):
    """stdout a pipe, COLUMNS=80: every failing request named with the JUnit wording, no line
    over 120 characters, the verdict and the rerun command included."""
    res = subprocess.run([sys.executable, "-m", "cli", "demo", "--fault", "late-ssm-checkpoint",
                          "--out", str(tmp_path), "-q"], capture_output=True, text=True,
                         timeout=300, cwd=paths.REPO, env={**os.environ, "COLUMNS": "80"})
    assert res.returncode == 1, res.stdout + res.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)
    junit = (tmp_path / "junit.xml").read_text()
    failing = [r for r in report["requests"] if not r["passed"]]
    assert failing
    for r in failing:
        start = f"{r['id']}#{r['repeat']} {r['status']}: "
        [head] = [line for line in lines if line.startswith(start)]
        assert head.split(": ", 1)[1] in junit  # the same words as its JUnit message
    assert any(line.startswith("FAIL: ") for line in lines)
    assert any(line.startswith("rerun: golden replay ") for line in lines)
