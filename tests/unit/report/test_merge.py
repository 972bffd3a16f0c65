"""`golden report --merge`: the reports of `--shard i/n` runs become one report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from golden_cli.main import app
from replay.jobs import session
from replay.utils.errors import UsageError
from replay.report.merge import merge_reports
from replay.golden.scenario import ScenarioSpec, build_plan
from tests.support.stub_server import StubConfig, StubServer

SPEC = ScenarioSpec(name="m", groups=3, branches=2, prefix_len=24, suffix_len=4, turns=1,
                    turn_suffix_len=4, max_new_tokens=6, top_k=3, seed=2)
runner = CliRunner()


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> tuple[Path, list[dict], dict]:
    d = tmp_path_factory.mktemp("merge")
    golden = d / "m.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        session.record_golden(build_plan(SPEC), golden, session.ServerTarget(url=stub.url))
    with StubServer(StubConfig()) as stub:
        target = session.ServerTarget(url=stub.url)
        parts = [session.replay_golden(golden, target, shard=f"{i}/3") for i in (1, 2, 3)]
        whole = session.replay_golden(golden, target)
    return golden, parts, whole


def test_merged_shards_hold_every_request_once(shards):
    _, parts, whole = shards
    merged = merge_reports(parts)
    assert sorted(r["id"] for r in merged["requests"]) == sorted(r["id"] for r in whole["requests"])


def test_merged_summary_adds_up_the_shards(shards):
    _, parts, whole = shards
    s = merge_reports(parts)["summary"]
    assert s["requests"] == whole["summary"]["requests"]
    assert s["tokens_compared"] == whole["summary"]["tokens_compared"]
    assert s["cache_hit_lengths"] == whole["summary"]["cache_hit_lengths"]


def test_the_worst_shard_verdict_wins(shards):
    _, parts, _ = shards
    failing = json.loads(json.dumps(parts[1]))
    failing["verdict"] = "fail"
    assert merge_reports([parts[0], failing, parts[2]])["verdict"] == "fail"
    broken = {**parts[2], "verdict": "error", "error": "server gone", "summary": None, "requests": []}
    merged = merge_reports([parts[0], failing, broken])
    assert merged["verdict"] == "error" and "server gone" in merged["error"]


def test_the_same_shard_twice_is_refused(shards):
    _, parts, _ = shards
    with pytest.raises(UsageError, match="more than one report"):
        merge_reports([parts[0], parts[0]])


def test_reports_of_different_goldens_are_refused(shards):
    _, parts, _ = shards
    with pytest.raises(UsageError, match="different golden"):
        merge_reports([parts[0], {**parts[1], "golden": "other.zarr"}])


def test_cli_writes_one_report_junit_and_page_and_exits_with_the_verdict(shards, tmp_path):
    _, parts, _ = shards
    paths = []
    for i, doc in enumerate(parts):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(doc))
    out = tmp_path / "merged"
    res = runner.invoke(app, ["report", "--merge", *map(str, paths), "--json", f"{out}.json",
                              "--junit", f"{out}.xml", "-o", f"{out}.html"])
    assert res.exit_code == 0, res.output
    assert json.loads(Path(f"{out}.json").read_text())["verdict"] == "pass"
    assert Path(f"{out}.xml").read_text().count("<testcase") == SPEC.requests
    assert Path(f"{out}.html").read_text().startswith("<!DOCTYPE html>")


def test_cli_refuses_several_reports_without_merge(shards, tmp_path):
    _, parts, _ = shards
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(parts[0]))
    b.write_text(json.dumps(parts[1]))
    res = runner.invoke(app, ["report", str(a), str(b), "-o", str(tmp_path / "x.html")])
    assert res.exit_code == 2 and "--merge" in res.output
