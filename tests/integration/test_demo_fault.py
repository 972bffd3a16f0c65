"""`golden demo --fault F`: the demo replays what the fault needs (detection.FAULT_SETUPS) and
catches it; an unknown fault is a usage error before anything starts."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli.main import app

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
