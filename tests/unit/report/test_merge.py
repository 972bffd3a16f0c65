"""`golden report --merge`: the reports of `--shard i/n` runs become one report, or a refusal."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.jobs import session
from replay.run.replayer import ReplayOptions
from replay.utils.errors import UsageError
from replay.report.merge import merge_reports
from replay.golden.scenario import ScenarioSpec, build_plan
from tests.support.reports import as_read_from_file
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
        parts = [as_read_from_file(session.replay_golden(golden, target, shard=f"{i}/3"))
                 for i in (1, 2, 3)]
        whole = as_read_from_file(session.replay_golden(golden, target))
    return golden, parts, whole


def edited(doc: dict, **changes) -> dict:
    out = copy.deepcopy(doc)
    out.update(changes)
    return out


def test_merged_shards_hold_every_request_once(shards):
    _, parts, whole = shards
    merged = merge_reports(parts)
    assert sorted(r["id"] for r in merged["requests"]) == sorted(r["id"] for r in whole["requests"])


def test_merged_summary_is_the_unsharded_summary(shards):
    _, parts, whole = shards
    assert merge_reports(parts)["summary"] == whole["summary"]


def test_a_merged_report_has_every_field_of_a_single_report(shards):
    _, parts, whole = shards
    merged = merge_reports(parts)
    assert set(whole) - set(merged) == set()
    assert merged["numerics"] == whole["numerics"] and merged["warnings"] == whole["warnings"]


def test_the_verdict_is_recomputed_from_the_requests_not_taken_from_a_shard(shards):
    _, parts, _ = shards
    lying = copy.deepcopy(parts[1])
    lying["requests"][0]["passed"] = False  # a failing request inside a shard that says pass
    assert lying["verdict"] == "pass"
    merged = merge_reports([parts[0], lying, parts[2]])
    assert merged["verdict"] == "fail"
    assert merged["summary"]["requests_failed"] == 1


def test_a_shard_that_errored_makes_the_merge_an_error(shards):
    _, parts, _ = shards
    broken = edited(parts[2], verdict="error", error="server gone", summary=None, requests=[])
    merged = merge_reports([parts[0], parts[1], broken])
    assert merged["verdict"] == "error" and "server gone" in merged["error"]


def test_a_missing_shard_is_refused(shards):
    _, parts, _ = shards
    with pytest.raises(UsageError, match="3/3 missing"):
        merge_reports(parts[:2])


def test_the_same_shard_twice_is_refused(shards):
    _, parts, _ = shards
    with pytest.raises(UsageError, match="1/3 is given more than once"):
        merge_reports([parts[0], parts[0], parts[1], parts[2]])


def test_overlapping_shards_are_refused(shards):
    _, parts, _ = shards
    overlap = copy.deepcopy(parts[1])
    overlap["requests"].append(copy.deepcopy(parts[0]["requests"][0]))
    with pytest.raises(UsageError, match="more than one shard"):
        merge_reports([parts[0], overlap, parts[2]])


def test_a_shard_with_requests_removed_is_refused(shards):
    _, parts, _ = shards
    cut = copy.deepcopy(parts[1])
    del cut["requests"][0]
    with pytest.raises(UsageError, match="truncated"):
        merge_reports([parts[0], cut, parts[2]])


def test_shards_of_different_splits_are_refused(shards):
    _, parts, _ = shards
    with pytest.raises(UsageError, match="different splits"):
        merge_reports([parts[0], parts[1], edited(parts[2], shard="3/4")])


def test_an_unsharded_report_is_refused(shards):
    _, _, whole = shards
    with pytest.raises(UsageError, match="not a shard report"):
        merge_reports([whole])


def test_shards_of_another_golden_with_the_same_file_name_are_refused(shards):
    _, parts, _ = shards
    other = edited(parts[1], golden_sha256="0" * 64)
    with pytest.raises(UsageError, match="different goldens"):
        merge_reports([parts[0], other, parts[2]])


def test_the_same_golden_under_another_file_name_merges(shards):
    _, parts, _ = shards
    moved = edited(parts[1], golden="elsewhere/m.zarr")
    assert merge_reports([parts[0], moved, parts[2]])["verdict"] == "pass"


@pytest.mark.parametrize("key, value, what", [
    ("repeat", 2, "repeat counts"), ("policy", "ulp:4", "policies"),
    ("require_tier", "host", "tier expectations"), ("expect_cache_asked", "none", "cache"),
    ("server_target", "launch:embedded-radix", "servers"),
])
def test_shards_replayed_differently_are_refused(shards, key, value, what):
    _, parts, _ = shards
    with pytest.raises(UsageError, match=f"different {what}"):
        merge_reports([parts[0], edited(parts[1], **{key: value}), parts[2]])


def test_shards_against_servers_of_other_numerics_are_refused(shards):
    _, parts, _ = shards
    other = copy.deepcopy(parts[1])
    other["numerics"]["fields"]["page_size"] = {"golden": 16, "replay": 64}
    with pytest.raises(UsageError, match="numerics"):
        merge_reports([parts[0], other, parts[2]])


@pytest.mark.parametrize("doc, what", [
    ({"schema": "golden-replay/report/1", "verdict": "pass"}, "no requests list"),
    ({"schema": "golden-replay/report/1", "verdict": "maybe", "requests": []}, "verdict"),
    ({"schema": "golden-replay/report/1", "verdict": ["pass"], "requests": []}, "verdict"),
    ({"schema": "golden-replay/report/1", "verdict": "pass", "requests": [{"id": "g0/b0/t0"}]},
     "passed judgement"),
])
def test_a_document_that_is_not_a_report_is_refused(shards, doc, what):
    _, parts, _ = shards
    with pytest.raises(UsageError, match=what):
        merge_reports([parts[0], doc, parts[2]])


def test_require_tier_on_a_shard_is_judged_by_the_merge(shards):
    golden, _, _ = shards
    options = ReplayOptions(require_tier="host")
    with StubServer(StubConfig()) as stub:  # the stub has no host tier
        target = session.ServerTarget(url=stub.url)
        parts = [session.replay_golden(golden, target, options, shard=f"{i}/3") for i in (1, 2, 3)]
    assert [p["verdict"] for p in parts] == ["pass"] * 3
    assert all("judged over the whole golden" in p["warnings"][-1] for p in parts)
    merged = merge_reports(parts)
    assert merged["verdict"] == "fail" and "host tier" in merged["tier_problem"]


def test_matrix_reports_merge_profile_by_profile(shards):
    _, parts, _ = shards

    def matrix(doc: dict) -> dict:
        return {"schema": doc["schema"], "verdict": doc["verdict"], "error": None,
                "golden": doc["golden"], "policy": doc["policy"], "shard": doc["shard"],
                "matrix": {"profiles": ["a"], "verdicts": {"a": doc["verdict"]},
                           "reports": {"a": {**doc, "profile": "a"}}}}

    lying = copy.deepcopy(parts[2])
    lying["requests"][0]["passed"] = False
    merged = merge_reports([matrix(parts[0]), matrix(parts[1]), matrix(lying)])
    assert merged["verdict"] == "fail" and merged["matrix"]["verdicts"] == {"a": "fail"}
    assert len(merged["matrix"]["reports"]["a"]["requests"]) == SPEC.requests
    with pytest.raises(UsageError, match="missing"):
        merge_reports([matrix(parts[0]), matrix(parts[1])])


def write(tmp_path: Path, docs: list[dict]) -> list[str]:
    paths = []
    for i, doc in enumerate(docs):
        paths.append(str(tmp_path / f"r{i}.json"))
        Path(paths[-1]).write_text(json.dumps(doc))
    return paths


def test_cli_writes_one_report_junit_and_page_and_exits_with_the_verdict(shards, tmp_path):
    _, parts, _ = shards
    out = tmp_path / "merged"
    res = runner.invoke(app, ["report", "--merge", *write(tmp_path, parts), "--json",
                              f"{out}.json", "--junit", f"{out}.xml", "-o", f"{out}.html"])
    assert res.exit_code == 0, res.output
    assert json.loads(Path(f"{out}.json").read_text())["verdict"] == "pass"
    assert Path(f"{out}.xml").read_text().count("<testcase") == SPEC.requests
    assert Path(f"{out}.html").read_text().startswith("<!DOCTYPE html>")


def test_a_failing_merge_prints_the_rerun_of_each_shard_that_did_not_pass(shards, tmp_path):
    _, parts, _ = shards
    reran = [edited(p, rerun=f"golden replay m.zarr --server http://127.0.0.1:1 --policy exact "
                             f"--shard {i}/3") for i, p in enumerate(parts, 1)]
    reran[1]["requests"][0]["passed"] = False
    res = runner.invoke(app, ["report", "--merge", *write(tmp_path, reran),
                              "--json", str(tmp_path / "merged.json")])
    assert res.exit_code == 1, res.output
    reruns = [line for line in res.output.splitlines() if line.startswith("rerun: ")]
    assert reruns == [f"rerun: {reran[1]['rerun']}"]
    assert json.loads((tmp_path / "merged.json").read_text())["reruns"] == [reran[1]["rerun"]]


def test_cli_refuses_a_missing_shard_with_exit_2_and_one_line(shards, tmp_path):
    _, parts, _ = shards
    res = runner.invoke(app, ["report", "--merge", *write(tmp_path, parts[:2])])
    assert res.exit_code == 2
    assert "3/3 missing" in res.output and "Traceback" not in res.output


def test_cli_refuses_several_reports_without_merge(shards, tmp_path):
    _, parts, _ = shards
    res = runner.invoke(app, ["report", *write(tmp_path, parts[:2]), "-o", str(tmp_path / "x.html")])
    assert res.exit_code == 2 and "--merge" in res.output


@pytest.mark.parametrize("matrix", [[], {"profiles": [], "reports": {}},
                                    {"profiles": [["a"]], "reports": {}},
                                    {"profiles": ["a"], "reports": {"a": "x"}}])
def test_a_malformed_matrix_document_is_refused_in_one_line(matrix):
    doc = {"schema": "golden-replay/report/1", "verdict": "pass", "matrix": matrix}
    with pytest.raises(UsageError, match="not a matrix report"):
        merge_reports([doc])


def zero_hits(doc: dict, problem: str | None) -> dict:
    """The shard as if its server had reported no cache hit at all."""
    out = copy.deepcopy(doc)
    for r in out["requests"]:
        r["cached_tokens"], r["cached_tokens_details"] = 0, {}
    out.update(no_cache_hits=True, hit_problem=problem)
    return out


def test_shards_that_never_hit_the_cache_merge_into_a_fail_with_the_reason(shards):
    _, parts, _ = shards
    merged = merge_reports([zero_hits(p, "no request was served from the cache") for p in parts])
    assert merged["verdict"] == "fail" and merged["no_cache_hits"] is True
    assert "no request was served from the cache in any shard" in merged["hit_problem"]


def test_one_shard_without_hits_does_not_fail_a_merge_that_hit(shards):
    _, parts, _ = shards
    merged = merge_reports([parts[0], parts[1], zero_hits(parts[2], None)])
    assert merged["no_cache_hits"] is False and merged["hit_problem"] is None


def _differences(a: object, b: object, path: str = "") -> list[str]:
    """Every key path at which two documents differ (values, or a key only one has)."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = [f"{path}{k}" for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            found += _differences(a[k], b[k], f"{path}{k}.")
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}{i}.")]
    return [] if a == b else [path.rstrip(".")]


def test_a_merged_document_is_the_unsharded_document_key_for_key(shards):
    """The one builder writes both: over every key, the merge of three shards says what the
    replay of the whole golden says, but for the merge's own record (merged_from), its run id
    and the replay server's clock."""
    _, parts, whole = shards
    merged = merge_reports(parts)
    assert sorted(_differences(whole, merged)) == ["merged_from", "run_id",
                                                   "server_meta.created"] or sorted(
        _differences(whole, merged)) == ["merged_from", "run_id"]
    assert [m["run_id"] for m in merged["merged_from"]] == [p["run_id"] for p in parts]
    assert merged["run_id"] not in {p["run_id"] for p in parts}
