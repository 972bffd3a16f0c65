"""The matrix: one golden against several launched profiles, one of which cannot start."""

from __future__ import annotations

import json
import shlex
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from cli.matrix_cmd import matrix_table
from replay.jobs.matrix import run_matrix
from replay.run.replayer import ReplayOptions
from replay.server.target import ServerTarget
from replay.server.transport import ClientOptions
from tests.support.console import joined_commands
from tests.unit.jobs.test_matrix import matrix_app, setup  # noqa: F401 - a fixture

runner = CliRunner()


@pytest.fixture(scope="module")
def cli_run(setup):
    d, golden, profiles = setup
    report, junit = d / "matrix.json", d / "matrix.xml"
    result = runner.invoke(matrix_app(), [
        "matrix", str(golden), "--launch", profiles["good"], "--launch", profiles["broken"],
        "--launch", profiles["drift"], "--report", str(report), "--junit", str(junit),
        "--log-dir", str(d / "logs"), "-q"])
    return result, json.loads(report.read_text()), ET.fromstring(junit.read_text()), d


def test_worst_profile_decides_the_exit_code(cli_run):
    result, doc, _, _ = cli_run
    assert result.exit_code == 2, result.output
    assert doc["verdict"] == "error"
    assert doc["matrix"]["verdicts"] == {"good": "pass", "broken": "error", "drift": "fail"}


def test_document_holds_one_normal_report_per_profile(cli_run):
    _, doc, _, d = cli_run
    assert doc["schema"] == "golden-replay/report/1"
    assert doc["matrix"]["profiles"] == ["good", "broken", "drift"]
    good = doc["matrix"]["reports"]["good"]
    assert good["verdict"] == "pass" and good["summary"]["requests"] == 8
    assert good["profile"] == "good" and good["server_log"] == str(d / "logs" / "good.log")
    assert good["server"].startswith("http://127.0.0.1:")
    drift = doc["matrix"]["reports"]["drift"]
    assert drift["summary"]["requests_failed"] == 8
    assert {r["first_divergence"]["position"] for r in drift["requests"]} == {1}


def test_profile_that_cannot_start_is_an_error_report_with_its_log_tail(cli_run):
    _, doc, _, _ = cli_run
    broken = doc["matrix"]["reports"]["broken"]
    assert broken["verdict"] == "error" and broken["summary"] is None
    assert "exited with code 3" in broken["error"] and "CUDA out of memory (fake)" in broken["error"]
    assert broken["server"] == "launch:broken"


def test_junit_has_one_testsuite_per_profile(cli_run):
    _, _, junit, _ = cli_run
    assert junit.tag == "testsuites"
    suites = {s.get("name"): s for s in junit.findall("testsuite")}
    assert list(suites) == ["good", "broken", "drift"]
    assert suites["good"].get("failures") == "0" and len(suites["good"].findall("testcase")) == 8
    assert suites["broken"].get("errors") == "1"
    assert suites["drift"].get("failures") == "8"
    assert junit.get("tests") == str(8 + 1 + 8) and junit.get("errors") == "1"
    assert junit.get("failures") == "8"


def test_console_shows_a_verdict_line_per_profile_and_the_matrix_verdict(cli_run):
    result, _, _, _ = cli_run
    lines = result.stdout.splitlines()
    assert any(line.startswith("good: PASS: 8 requests") for line in lines)
    assert any(line.startswith("drift: FAIL: 8 requests") for line in lines)
    assert lines[-1] == "MATRIX ERROR: 3 profile(s), 1 pass, 1 fail, 1 error"


def test_a_profiles_error_is_one_error_line_on_stderr(cli_run):
    result, _, _, _ = cli_run
    assert any(line.startswith("error: broken: launch profile 'broken'")
               for line in result.stderr.splitlines())
    assert not any(line.startswith("broken:") for line in result.stdout.splitlines())


def test_each_profile_report_carries_the_command_that_replays_it_alone(cli_run, tmp_path,
                                                                        monkeypatch):
    from cli.main import app

    _, doc, _, _ = cli_run
    rerun = doc["matrix"]["reports"]["drift"]["rerun"]
    words = shlex.split(rerun)
    assert words[:3] == ["golden", "replay", doc["golden"]]
    monkeypatch.chdir(tmp_path)  # the rerun's server log goes to ./golden-logs
    again = runner.invoke(app, [*words[1:], "--report", str(tmp_path / "r.json"), "-q"])
    assert again.exit_code == 1, again.output
    replayed = json.loads((tmp_path / "r.json").read_text())
    assert replayed["summary"]["requests_failed"] == 8


def test_the_console_gives_the_rerun_of_each_profile_that_did_not_pass(cli_run):
    result, doc, _, _ = cli_run
    reruns = joined_commands(result.stdout, "rerun ")
    reports = doc["matrix"]["reports"]
    assert reruns == [f"rerun broken: {reports['broken']['rerun']}",
                      f"rerun drift: {reports['drift']['rerun']}"]


def test_request_by_profile_table(cli_run):
    _, doc, _, _ = cli_run
    table = matrix_table(doc)
    assert [c.header for c in table.columns] == ["request", "broken", "drift"]
    assert table.row_count == 8
    cells = {c.header: list(c._cells) for c in table.columns}
    assert set(cells["broken"]) == {"error"}
    assert set(cells["drift"]) == {"first difference at 1 (logprob)"}


def test_a_passing_profile_is_a_count_line_not_a_column_of_ok_rows(cli_run):
    result, doc, _, _ = cli_run
    lines = result.stdout.splitlines()
    assert "good: all 8 request(s) ok" in lines
    only_good = {**doc, "matrix": {**doc["matrix"], "profiles": ["good"]}}
    assert matrix_table(only_good) is None


def test_the_table_lists_only_the_requests_not_passing_everywhere(cli_run):
    _, doc, _, _ = cli_run
    drift = doc["matrix"]["reports"]["drift"]
    fixed = {**drift, "requests": [{**r, "passed": True} if i else r
                                   for i, r in enumerate(drift["requests"])]}
    only = {**doc, "matrix": {**doc["matrix"], "profiles": ["good", "drift"],
                              "reports": {**doc["matrix"]["reports"], "drift": fixed}}}
    table = matrix_table(only)
    assert table.row_count == 1 and table.caption == "7 request(s) ok on every profile not shown"


def test_shard_replays_only_its_groups(setup, tmp_path):
    _, golden, profiles = setup
    doc = run_matrix(golden, [ServerTarget(profile=profiles["good"], log_dir=tmp_path)],
                     ReplayOptions(), ClientOptions(), shard="2/2")
    report = doc["matrix"]["reports"]["good"]
    assert doc["verdict"] == "pass" and doc["shard"] == "2/2"
    assert {r["id"][:2] for r in report["requests"]} == {"g1"}
    assert report["golden_meta"]["shard"]["unit"] == "group"
