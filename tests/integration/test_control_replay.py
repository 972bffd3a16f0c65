"""`golden replay --control`: the same golden against a control server (the tested profile's
radix-only twin), and each failure said to be the tier's alone or also on the control, on the
embedded engine (docs/control.md). The real SGLang counterpart is tests/e2e/sglang_cpu/
test_control.py."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.server.launch import launched
from replay.server.profile import load_profile

runner = CliRunner()
# 2 groups x 2 branches, one follow-up turn: turn 0's 120 new tokens cross the engine's 256 track
# boundary while decoding, so a follow-up turn's hit reuses a decode-time SSM checkpoint
SMALL = """groups = 2
branches = 2
prefix_len = 128
suffix_len = 32
turns = 1
turn_suffix_len = 16
max_new_tokens = 120
top_k = 5
"""


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("control")
    (where / "small.toml").write_text(SMALL)
    res = runner.invoke(app, ["record", "--launch", "embedded-reference", "--scenario",
                              str(where / "small.toml"), "--out", str(where / "small.zarr"),
                              "--log-dir", str(where / "logs"), "--quiet"])
    assert res.exit_code == 0, res.output
    return where / "small.zarr"


def replay(golden: Path, tmp_path: Path, *args: str) -> tuple[int, str, dict | None]:
    report = tmp_path / "report.json"
    logs = ["--log-dir", str(tmp_path / "logs")] if "--launch" in args else []  # else refused
    res = runner.invoke(app, ["replay", str(golden), "--report", str(report), "--junit",
                              str(tmp_path / "junit.xml"), *logs, *args])
    doc = json.loads(report.read_text()) if report.exists() else None
    return res.exit_code, res.output, doc


@pytest.fixture(scope="module")
def tier_fault(golden, tmp_path_factory) -> tuple[int, str, dict, Path]:
    """A fault only the tested server has (a late SSM checkpoint under overlap scheduling on
    the HiCache engine); the control is the profile's own (`auto`: embedded-radix)."""
    where = tmp_path_factory.mktemp("tier")
    code, output, doc = replay(golden, where, "--launch", "embedded-hicache", "--fault",
                               "late-ssm-checkpoint", "--control", "auto")
    return code, output, doc, where


def test_a_failure_only_the_tested_server_has_is_the_tiers_alone(tier_fault):
    code, _, doc, _ = tier_fault
    failing = [r for r in doc["requests"] if not r["passed"]]
    assert code == 1 and failing
    assert all(r["control_status"] == "identical" and r["control_passed"] for r in failing)
    assert not any(r["control_same_bits"] for r in failing)
    assert doc["summary"]["failed_on_tier_only"] == doc["summary"]["requests_failed"]


def test_the_control_is_the_profiles_own_and_gets_no_fault(tier_fault):
    _, _, doc, _ = tier_fault
    assert doc["control"]["target"] == "launch:embedded-radix"
    assert doc["control"]["verdict"] == "pass"


def test_passing_requests_carry_no_attribution(tier_fault):
    _, _, doc, _ = tier_fault
    passing = [r for r in doc["requests"] if r["passed"]]
    assert passing and all(r["control_status"] is None for r in passing)


def test_the_console_and_junit_say_whose_failure_it_is(tier_fault):
    _, output, doc, where = tier_fault
    assert "the tier's alone" in output
    assert "control launch:embedded-radix:" in output
    messages = [f.get("message") for f in ET.parse(where / "junit.xml").iter("failure")]
    assert messages and all(m.endswith("the tier's alone") for m in messages)


def test_a_failure_the_control_shares_is_also_on_the_control_with_the_same_bits(
        golden, tmp_path):
    """The same numerics fault (split-K by extend length in the MLP) on both servers: every
    failure is the control's too, answered with identical bits."""
    profile = load_profile("embedded-radix")
    with launched(profile, model=None, log_path=tmp_path / "control.log",
                  fault="split-k-by-extend") as url:
        code, output, doc = replay(golden, tmp_path, "--launch", "embedded-hicache", "--fault",
                                   "split-k-by-extend", "--control-server", url)
    failing = [r for r in doc["requests"] if not r["passed"]]
    assert code == 1 and failing
    assert all(r["control_passed"] is False and r["control_same_bits"] for r in failing)
    assert doc["summary"]["failed_on_tier_only"] == 0
    assert doc["control"]["same_bits_on_control"] == len(failing)
    assert "also on the control (not the tier)" in output


def test_a_control_that_cannot_be_replayed_is_an_error_that_keeps_the_requests(golden, tmp_path):
    code, output, doc = replay(golden, tmp_path, "--launch", "embedded-hicache",
                               "--control-server", "http://127.0.0.1:9")
    assert code == 2
    assert doc["verdict"] == "error" and "the control replay" in doc["error"]
    assert doc["requests"] and doc["summary"]["requests"] == 8


@pytest.mark.parametrize("args, message", [
    (["--server", "http://127.0.0.1:9", "--control", "embedded-radix"], "needs --launch"),
    (["--launch", "embedded-hicache", "--control", "embedded-radix", "--control-server",
      "http://127.0.0.1:9"], "not both"),
    (["--launch", "embedded-radix", "--control", "auto"], "names no control"),
    (["--launch", "embedded-hicache", "--control", "no-such-profile"], "no launch profile"),
])
def test_a_control_that_cannot_be_given_is_refused_before_anything_starts(golden, tmp_path,
                                                                          args, message):
    code, output, doc = replay(golden, tmp_path, *args)
    assert code == 2 and message in output
    assert not (tmp_path / "logs").exists()  # nothing was launched
