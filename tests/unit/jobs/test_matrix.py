"""The matrix job without a server started: the checks before anything launches, the worst
verdict, the cells, the JUnit and the verdict lines. Against launched fake servers:
tests/integration/test_matrix_cmd.py."""

from __future__ import annotations

from xml.etree import ElementTree as ET

import pytest
import typer
from typer.testing import CliRunner

from cli.main import exits_cleanly
from cli.matrix_cmd import cell, matrix, verdict_lines
from replay.server.transport import ClientOptions
from replay.utils.errors import UsageError
from replay.jobs.matrix import matrix_junit, run_matrix
from replay.report.document import worst_verdict
from replay.server.target import ServerTarget
from replay.run.replayer import ReplayOptions
from tests.data.fake_servers.helpers import fake_profile, record_golden

runner = CliRunner()


def matrix_app() -> typer.Typer:
    """The command as cli/main.py registers it."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command("matrix")(exits_cleanly(matrix))
    app.command("unused")(lambda: None)  # two commands, so "matrix" stays a subcommand
    return app


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("matrix")
    golden = record_golden(d / "small.zarr")
    profiles = {
        "good": fake_profile(d, "healthy_stub.py", name="good"),
        "drift": fake_profile(d, "healthy_stub.py", name="drift", args=("--drift",)),
        "broken": fake_profile(d, "dies_at_once.py", name="broken"),
    }
    return d, golden, profiles


def test_unreadable_golden_is_an_error_for_every_profile_without_launching(setup, tmp_path):
    _, _, profiles = setup
    targets = [ServerTarget(profile=profiles[n], log_dir=tmp_path / "logs")
               for n in ("good", "drift")]
    doc = run_matrix(tmp_path / "missing.zarr", targets, ReplayOptions(), ClientOptions())
    assert doc["verdict"] == "error"
    assert all(r["verdict"] == "error" for r in doc["matrix"]["reports"].values())
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("launches, message", [
    (["no-such-profile"], "no launch profile or file named 'no-such-profile'"),
    (["embedded-reference", "sglang-reference"], "'sglang-reference' needs a model"),
    (["embedded-reference", "embedded-reference"], "given twice"),
])
def test_bad_profiles_stop_the_matrix_before_anything_starts(setup, tmp_path, launches, message):
    _, golden, _ = setup
    args = ["matrix", str(golden), "--log-dir", str(tmp_path / "logs"), "-q"]
    for name in launches:
        args += ["--launch", name]
    result = runner.invoke(matrix_app(), args)
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "logs").exists()


def test_invalid_shard_is_a_usage_error(setup, tmp_path):
    _, golden, profiles = setup
    result = runner.invoke(matrix_app(), ["matrix", str(golden), "--launch", profiles["good"],
                                          "--shard", "3/2", "--log-dir", str(tmp_path)])
    assert result.exit_code == 2 and "invalid --shard '3/2'" in result.output


def test_worst_verdict_orders_error_over_fail_over_pass():
    assert worst_verdict(["pass", "fail"]) == "fail"
    assert worst_verdict(["fail", "error", "pass"]) == "error"
    assert worst_verdict(["pass"]) == "pass"


def test_cells_say_where_a_request_differs_in_the_junit_wording():
    assert cell({"passed": True}) == "ok"
    first = {"kind": "token", "position": 5}
    assert cell({"passed": False, "status": "token_divergence", "first_divergence": first}) == \
        "first difference at 5 (token)"
    drift = {"passed": False, "status": "token_divergence", "token_divergence_position": 76,
             "first_divergence": {"kind": "logprob", "position": 0}}
    assert cell(drift) == "first difference at 0 (logprob); tokens diverge at 76"
    assert cell({"passed": False, "status": "cache_miss", "first_divergence": None}) == "miss"


def test_matrix_junit_of_an_all_error_document():
    doc = {"matrix": {"profiles": ["a"], "reports": {"a": {"verdict": "error", "error": "x",
                                                           "requests": []}}}}
    root = ET.fromstring(matrix_junit(doc))
    assert root.get("errors") == "1" and root.find("testsuite").get("name") == "a"


def test_verdict_lines_end_with_the_matrix_line():
    report = {"verdict": "error", "error": "boom"}
    doc = {"verdict": "error", "matrix": {"profiles": ["a"], "reports": {"a": report}}}
    assert verdict_lines(doc) == ["a: error: boom", "MATRIX ERROR: 1 profile(s), 0 pass, 0 fail, 1 error"]


def test_resolve_profiles_needs_at_least_one(setup):
    _, golden, _ = setup
    with pytest.raises(UsageError, match="at least one"):
        run_matrix(golden, [], ReplayOptions(), ClientOptions())
