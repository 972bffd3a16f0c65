"""A replay that never hit the cache proves nothing: the verdict line and the report say so, and
with an expectation that asks for hits (`auto` on a server whose settings say it caches, or an
explicit one) it is a fail with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.support.goldens import record_scenario, replay_on_stub
from tests.support.console import verdict_text
from tests.support.stub_server import StubConfig, StubServer

ONE_TURN = """groups = 2
branches = 2
prefix_len = 40
suffix_len = 8
turns = 0
turn_suffix_len = 0
max_new_tokens = 8
top_k = 5
"""
runner = CliRunner()
# A server that says its radix cache is on, yet never reports a hit.
NEVER_HITS = StubConfig(radix=False, extra_server_info={"disable_radix_cache": False})


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    """Only turn-0 requests: no request has a hit rule of its own."""
    return record_scenario(tmp_path_factory.mktemp("golden"), ONE_TURN)


replay = replay_on_stub


def test_auto_on_a_server_that_says_it_caches_fails_when_nothing_hit(golden, tmp_path):
    res, doc = replay(golden, tmp_path, NEVER_HITS)
    assert res.exit_code == 1, res.output
    assert doc["verdict"] == "fail" and doc["no_cache_hits"] is True
    assert "no request was served from the cache" in doc["hit_problem"]
    assert doc["hit_problem"] in verdict_text(res.stdout)  # on the verdict line


def test_an_explicit_expectation_fails_when_nothing_hit(golden, tmp_path):
    res, doc = replay(golden, tmp_path, StubConfig(radix=False), "--expect-cache", "any")
    assert res.exit_code == 1
    assert "cache expectation any asks for hits" in doc["hit_problem"]


def test_no_expectation_passes_but_says_it_proves_nothing(golden, tmp_path):
    res, doc = replay(golden, tmp_path, StubConfig(radix=False))  # auto: the server caches nothing
    assert res.exit_code == 0, res.output
    assert doc["no_cache_hits"] is True and doc["hit_problem"] is None
    verdict = verdict_text(res.stdout)
    assert verdict.startswith("PASS") and "proves nothing about the cache" in verdict
    assert any("proves nothing about the cache" in w for w in doc["warnings"])


def test_the_junit_file_has_a_failing_cache_hits_case(golden, tmp_path):
    junit = tmp_path / "junit.xml"
    with StubServer(NEVER_HITS) as stub:
        runner.invoke(app, ["replay", str(golden), "--server", stub.url, "--junit", str(junit), "-q"])
    assert 'name="cache-hits"' in junit.read_text()


def test_a_replay_with_hits_says_nothing_of_the_kind(golden, tmp_path):
    res, doc = replay(golden, tmp_path, StubConfig(), "--repeat", "1")
    assert doc["no_cache_hits"] is False and doc["hit_problem"] is None
    assert "proves nothing" not in res.stdout


def test_a_golden_of_unrelated_single_requests_only_warns(tmp_path):
    """One request per group: nothing could ever be served from the cache."""
    (tmp_path / "s.toml").write_text(ONE_TURN.replace("branches = 2", "branches = 1"))
    with StubServer(StubConfig(radix=False)) as stub:
        runner.invoke(app, ["record", "--server", stub.url, "--scenario", str(tmp_path / "s.toml"),
                            "--out", str(tmp_path / "s.zarr"), "--quiet"])
    res, doc = replay(tmp_path / "s.zarr", tmp_path, NEVER_HITS)
    assert res.exit_code == 0, res.output
    assert doc["no_cache_hits"] is True and doc["hit_problem"] is None
    assert "proves nothing about the cache" in verdict_text(res.stdout)
