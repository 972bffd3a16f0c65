"""The pytest plugin, run inside pytester: pass, fail with the CLI's lines, error, skip, launch."""

from __future__ import annotations

import json
from importlib.metadata import entry_points

import numpy as np
import pytest

from tests.data.fake_servers.helpers import fake_profile, record_golden
from tests.support.stub_server import StubConfig, StubServer

pytest_plugins = ["pytester"]

TEST_FILE = """
def test_replay(golden_replay):
    doc = golden_replay({path!r}{options})
    assert doc["verdict"] == "pass"
"""


def plugin_args() -> list[str]:
    """Load the plugin explicitly unless its pytest11 entry point is installed (then pytest
    loads it already, and loading it twice would be refused)."""
    installed = any(ep.value == "replay.jobs.pytest_plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "replay.jobs.pytest_plugin"]


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    return record_golden(tmp_path_factory.mktemp("plugin") / "small.zarr")


def bump_position_2(n, ids, resp):
    e = resp["meta_info"]["output_token_logprobs"][2]
    e[0] = float(np.nextafter(np.float32(e[0]), np.float32(0)))
    return resp


def run(pytester, golden, *args, options=""):
    pytester.makepyfile(test_golden=TEST_FILE.format(path=str(golden), options=options))
    return pytester.runpytest(*plugin_args(), *args)


def test_pass_returns_the_report_and_writes_it(pytester, golden, tmp_path):
    with StubServer(StubConfig()) as stub:
        result = run(pytester, golden, "--golden-server", stub.url,
                     "--golden-report-dir", str(tmp_path / "reports"))
    result.assert_outcomes(passed=1)
    [report] = (tmp_path / "reports").iterdir()
    assert report.name == "test_golden.py_test_replay.json"
    assert json.loads(report.read_text())["verdict"] == "pass"


def test_the_history_option_adds_every_replay_to_the_history(pytester, golden, tmp_path):
    """Given as a value (no report directory needed), never read from the environment."""
    from replay.history.store import HistoryStore

    history = tmp_path / "h.sqlite"
    with StubServer(StubConfig()) as stub:
        result = run(pytester, golden, "--golden-server", stub.url, "--golden-history",
                     str(history))
    result.assert_outcomes(passed=1)
    with HistoryStore.open(str(history)) as store:
        [run_] = store.list_runs()
    assert run_["verdict"] == "pass" and run_["golden_name"] == str(golden)


def test_a_log_dir_or_model_for_a_running_server_is_a_usage_error_not_ignored(pytester, golden):
    with StubServer(StubConfig()) as stub:
        result = run(pytester, golden, "--golden-server", stub.url, "--golden-model", "m")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --golden-model applies only with --golden-launch (*"])


def test_a_misspelt_launch_profile_is_one_usage_error_line_before_any_test(pytester, golden):
    result = run(pytester, golden, "--golden-launch", "embeded-hicache")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.stdout.lines + result.stderr.lines
    [line] = [l for l in output if "embeded-hicache" in l]
    assert line.startswith("ERROR: no launch profile or file named 'embeded-hicache' (built-in: ")
    assert "embedded-hicache" in line
    assert not any("During handling" in l or "Traceback" in l for l in output)
    assert not any("error" in l and "test_replay" in l for l in output)  # no test ran


def test_fail_shows_the_same_first_divergence_lines_as_the_cli(pytester, golden):
    with StubServer(StubConfig(tamper=bump_position_2)) as stub:
        result = run(pytester, golden, "--golden-server", stub.url)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*FAIL: 8 requests x 1 repeat(s)*8 failed (8 diverged*",
        "*g0/b0/t0#0 logprob_drift: first difference at output position 2 (logprob)*",
        "*golden token * logprob *, replay token * logprob *, 1 ulp; cached *",
    ])


def test_options_reach_the_replay(pytester, golden):
    with StubServer(StubConfig(tamper=bump_position_2)) as stub:
        result = run(pytester, golden, "--golden-server", stub.url, options=", policy='ulp:1'")
    result.assert_outcomes(passed=1)


def test_error_is_counted_as_an_error_not_a_failure(pytester, golden):
    result = run(pytester, golden, "--golden-server", "http://127.0.0.1:9")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*GoldenReplayError*cannot connect to http://127.0.0.1:9*"])


def test_unreadable_golden_is_an_error(pytester, tmp_path):
    with StubServer(StubConfig()) as stub:
        result = run(pytester, tmp_path / "missing.zarr", "--golden-server", stub.url)
    result.assert_outcomes(errors=1)


def test_without_a_server_the_test_is_skipped_with_the_reason(pytester, golden):
    result = run(pytester, golden, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no golden server: pass --golden-server URL or --golden-launch PROFILE*"])


@pytest.mark.parametrize("option", ["--golden-server", "--golden-launch", "--golden-api-key",
                                    "--golden-history"])
def test_an_option_given_empty_is_a_usage_error_not_a_green_skip(pytester, golden, option):
    result = run(pytester, golden, option, "")  # e.g. --golden-server "$UNSET_CI_VARIABLE"
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option} is empty (an unset CI variable?)*"])


def test_an_unreachable_server_is_an_error_not_a_skip(pytester, golden):
    result = run(pytester, golden, "--golden-server", "http://127.0.0.1:9")
    result.assert_outcomes(errors=1, skipped=0)
    assert result.ret != 0


def test_the_api_key_option_reaches_the_server_and_no_output(pytester, golden):
    with StubServer(StubConfig()) as stub:
        result = run(pytester, golden, "--golden-server", stub.url,
                     "--golden-api-key", "s3cret-key")
    result.assert_outcomes(passed=1)
    assert stub.auth_headers and set(stub.auth_headers) == {"Bearer s3cret-key"}
    assert "s3cret-key" not in result.stdout.str()


def test_the_api_key_comes_from_golden_api_key_in_the_environment(pytester, golden,
                                                                   monkeypatch):
    monkeypatch.setenv("GOLDEN_API_KEY", "env-key")
    with StubServer(StubConfig()) as stub:
        result = run(pytester, golden, "--golden-server", stub.url)
    result.assert_outcomes(passed=1)
    assert set(stub.auth_headers) == {"Bearer env-key"}


def test_launch_starts_one_server_for_the_session(pytester, golden, tmp_path):
    profile = fake_profile(tmp_path, "healthy_stub.py", name="stub")
    pytester.makepyfile(test_two=TEST_FILE.format(path=str(golden), options="")
                        + TEST_FILE.replace("test_replay", "test_again").format(path=str(golden), options=""))
    result = pytester.runpytest(*plugin_args(), "--golden-launch", profile,
                                "--golden-log-dir", str(tmp_path / "logs"))
    result.assert_outcomes(passed=2)
    assert [p.name for p in (tmp_path / "logs").iterdir()] == ["stub.log"]
    assert (tmp_path / "logs" / "stub.log").read_text().count("stub listening on") == 1


def test_launch_that_fails_errors_every_test_with_the_log_tail(pytester, golden, tmp_path):
    profile = fake_profile(tmp_path, "dies_at_once.py", name="broken")
    result = run(pytester, golden, "--golden-launch", profile, "--golden-log-dir", str(tmp_path))
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*golden server: launch profile 'broken': the server exited with "
                                 "code 3*CUDA out of memory (fake)*"])
