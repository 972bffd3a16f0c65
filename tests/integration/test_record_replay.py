"""End to end through the `golden` CLI against the in-process protocol stub.

Each test records a small scenario from the stub, then replays it against a stub that changes
one thing, and checks the verdict, the exit code and where the report points.
"""

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.golden.store import read_golden
from replay.server.launch import free_port
from tests.support.goldens import SMALL_TREE, record_scenario, replay_on_stub
from tests.support.stub_server import StubConfig, StubServer

runner = CliRunner()


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    return record_scenario(tmp_path_factory.mktemp("golden"), SMALL_TREE)


replay = replay_on_stub


def input_of(golden: Path, request_id: str) -> list[int]:
    g = read_golden(golden)
    return g.input_ids(g.index(request_id)).tolist()


def tamper_at(golden: Path, request_id: str, change):
    target = input_of(golden, request_id)

    def tamper(n, ids, resp):
        if ids == target:
            change(resp)
        return resp
    return tamper


def failing(doc):
    return [r for r in doc["requests"] if not r["passed"]]


def test_clean_replay_passes(golden, tmp_path):
    res, doc = replay(golden, tmp_path, StubConfig())
    assert res.exit_code == 0, res.output
    assert doc["verdict"] == "pass" and doc["summary"]["requests"] == 12
    assert doc["summary"]["tokens_compared"] == 12 * 12
    assert "PASS" in res.output


def test_replay_reports_the_hit_length_histogram(golden, tmp_path):
    _, doc = replay(golden, tmp_path, StubConfig())
    hist = doc["summary"]["cache_hit_lengths"]
    assert sum(hist.values()) == 12 and any(int(k) > 0 for k in hist)


def test_one_ulp_change_is_caught_at_the_right_request_and_position(golden, tmp_path):
    def bump(resp):
        e = resp["meta_info"]["output_token_logprobs"][7]
        e[0] = float(np.nextafter(np.float32(e[0]), np.float32(0)))
    res, doc = replay(golden, tmp_path, StubConfig(tamper=tamper_at(golden, "g1/b0/t1", bump)))
    assert res.exit_code == 1
    [bad] = failing(doc)
    assert bad["id"] == "g1/b0/t1" and bad["status"] == "logprob_drift"
    assert bad["first_divergence"]["position"] == 7 and bad["first_divergence"]["ulp"] == 1
    assert "g1/b0/t1" in res.output


def test_sign_of_zero_change_is_caught(tmp_path):
    def with_zero(sign):
        def tamper(n, ids, resp):
            resp["meta_info"]["output_token_logprobs"][3][0] = sign * 0.0
            return resp
        return tamper
    out = tmp_path / "z.zarr"
    with StubServer(StubConfig(radix=False, tamper=with_zero(1.0))) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    res, doc = replay(out, tmp_path, StubConfig(tamper=with_zero(-1.0)))
    assert res.exit_code == 1
    [bad] = failing(doc)
    assert bad["id"] == "g0/b0/t0" and bad["first_divergence"]["position"] == 3
    assert bad["first_divergence"]["golden_bits"] == "0x0000000000000000"
    assert bad["first_divergence"]["replay_bits"] == "0x8000000000000000"


def test_changed_token_is_caught_as_token_divergence(golden, tmp_path):
    def swap(resp):
        resp["output_ids"][5] = 4000
        resp["meta_info"]["output_token_logprobs"][5][1] = 4000
    res, doc = replay(golden, tmp_path, StubConfig(tamper=tamper_at(golden, "g1/b1/t2", swap)))
    assert res.exit_code == 1
    [bad] = failing(doc)
    assert bad["status"] == "token_divergence" and bad["first_divergence"]["position"] == 5
    assert bad["first_divergence"]["replay_token"] == 4000
    assert bad["tokens_compared"] == 6


def test_top_k_tie_broken_the_other_way_passes(golden, tmp_path):
    def other_tie(resp):
        for row in resp["meta_info"]["output_top_logprobs"]:
            row[4] = [row[4][0], (row[4][1] + 1) % 4096, None]  # rank 5 ties rank 6 in the stub
    res, doc = replay(golden, tmp_path, StubConfig(tamper=tamper_at(golden, "g0/b0/t1", other_tie)))
    assert res.exit_code == 0, res.output


def test_server_with_no_cache_hits_fails_the_cache_expectation(golden, tmp_path):
    res, doc = replay(golden, tmp_path, StubConfig(radix=False), "--expect-cache", "attention")
    assert res.exit_code == 1
    assert doc["summary"]["cache_misses"] == 8  # every turn >= 1 request
    assert {r["status"] for r in failing(doc)} == {"cache_miss"}


def test_require_tier_host_fails_when_no_hit_came_from_host(golden, tmp_path):
    res, doc = replay(golden, tmp_path, StubConfig(), "--require-tier", "host")
    assert res.exit_code == 1 and "host tier" in doc["tier_problem"]


def test_http_500_is_an_error_not_a_verdict(golden, tmp_path):
    res, doc = replay(golden, tmp_path, StubConfig(fail_status=500))
    assert res.exit_code == 2
    assert doc["verdict"] == "error" and "HTTP 500" in doc["error"]


def test_malformed_response_is_an_error_naming_the_request(golden, tmp_path):
    def drop(resp):
        del resp["meta_info"]["output_token_logprobs"]
    res, doc = replay(golden, tmp_path, StubConfig(tamper=tamper_at(golden, "g0/b0/t0", drop)))
    assert res.exit_code == 2 and "g0/b0/t0" in doc["error"]


def test_non_json_response_is_an_error(golden, tmp_path):
    res, doc = replay(golden, tmp_path, StubConfig(raw_body="<html>oops</html>"))
    assert res.exit_code == 2 and "not JSON" in doc["error"]


def test_model_mismatch_is_refused(golden, tmp_path):
    res, doc = replay(golden, tmp_path, StubConfig(model_path="other/model"))
    assert res.exit_code == 2 and "other/model" in doc["error"]
    res, _ = replay(golden, tmp_path, StubConfig(model_path="other/model"), "--allow-model-mismatch")
    assert res.exit_code == 0


def test_unreachable_server_is_an_error(golden, tmp_path):
    res = runner.invoke(app, ["replay", str(golden), "--server", "http://127.0.0.1:9", "--quiet"])
    assert res.exit_code == 2 and "cannot connect" in res.output


def test_a_refused_connection_names_the_url_and_a_hint(golden, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    res = runner.invoke(app, ["replay", str(golden), "--server", url, "--quiet"])
    assert res.exit_code == 2
    assert res.output == (f"error: cannot connect to {url}: connection refused (is a server "
                          "running there? --launch PROFILE starts one: see golden profiles)\n")


@pytest.mark.parametrize("command", ["replay", "matrix"])
def test_an_expect_cache_typo_is_refused_before_any_server_is_launched(golden, tmp_path, command):
    logs = tmp_path / "logs"
    res = runner.invoke(app, [command, str(golden), "--launch", "embedded-hicache", "--log-dir",
                              str(logs), "--expect-cache", "atention", "--quiet"])
    assert res.exit_code == 2
    assert res.output == ("error: invalid --expect-cache 'atention': use auto, none, any, "
                          "attention or mamba:INTERVAL\n")
    assert not logs.exists()  # no server was started: it would have written its log there


def test_repeat_reports_how_many_repeats_failed(golden, tmp_path):
    calls = {"n": 0}
    target = input_of(golden, "g0/b0/t2")

    def second_repeat_only(n, ids, resp):
        if ids == target:
            calls["n"] += 1
            if calls["n"] == 2:
                resp["meta_info"]["output_token_logprobs"][0][0] = -99.0
        return resp
    res, doc = replay(golden, tmp_path, StubConfig(tamper=second_repeat_only), "--repeat", "3")
    assert res.exit_code == 1
    assert doc["summary"]["repeats"] == 3 and doc["summary"]["repeats_failed"] == 1
    assert doc["summary"]["failed_repeat_indices"] == [1]


@pytest.mark.parametrize("schedule", ["lockstep", "interleave", "dag"])
def test_every_schedule_replays_clean(golden, tmp_path, schedule):
    res, _ = replay(golden, tmp_path, StubConfig(), "--schedule", schedule)
    assert res.exit_code == 0, res.output


def test_junit_has_one_testcase_per_request(golden, tmp_path):
    junit = tmp_path / "j.xml"
    with StubServer(StubConfig()) as stub:
        runner.invoke(app, ["replay", str(golden), "--server", stub.url, "--junit", str(junit), "-q"])
    assert junit.read_text().count("<testcase") == 12


def test_record_refuses_to_overwrite_without_force(golden):
    with StubServer(StubConfig(radix=False)) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(golden), "-q"])
    assert res.exit_code == 2 and "--force" in res.output


def test_record_refuses_a_token_range_beyond_the_vocabulary(tmp_path):
    with StubServer(StubConfig(radix=False, vocab_size=1000)) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(tmp_path / "x.zarr"), "-q"])
    assert res.exit_code == 2 and "vocabulary" in res.output
    assert not (tmp_path / "x.zarr").exists()


def test_record_warns_when_the_reference_has_a_radix_cache(tmp_path):
    with StubServer(StubConfig(radix=True)) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(tmp_path / "x.zarr"), "-q"])
    assert res.exit_code == 0 and "radix cache on" in res.output


def test_check_determinism_refuses_a_non_deterministic_reference(tmp_path):
    calls = {"n": 0}

    def flaky(n, ids, resp):
        calls["n"] += 1
        if calls["n"] == 2:
            resp["meta_info"]["output_token_logprobs"][2][0] = -7.0
        return resp
    out = tmp_path / "x.zarr"
    with StubServer(StubConfig(radix=False, tamper=flaky)) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(out), "--check-determinism", "2", "-q"])
    assert res.exit_code == 1 and "g0/b0/t0" in res.output and "position 2" in res.output
    assert not out.exists()


def test_check_determinism_says_the_recordings_agreed(tmp_path):
    with StubServer(StubConfig(radix=False)) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(tmp_path / "x.zarr"), "--check-determinism", "2",
                                  "-q"])
    assert res.exit_code == 0, res.output
    assert "check-determinism: 2 recordings agreed bit for bit on 1 requests" in res.output


def test_diff_of_a_golden_with_itself_passes(golden):
    res = runner.invoke(app, ["diff", str(golden), str(golden)])
    assert res.exit_code == 0, res.output


def test_show_prints_the_tree(golden):
    res = runner.invoke(app, ["show", str(golden)])
    assert res.exit_code == 0 and "g1/b1/t2" in res.output


def test_verify_accepts_a_sound_golden(golden):
    res = runner.invoke(app, ["verify", str(golden)])
    assert res.exit_code == 0 and "ok" in res.output


def test_bad_policy_is_a_usage_error(golden):
    res = runner.invoke(app, ["replay", str(golden), "--server", "http://127.0.0.1:9",
                              "--policy", "fuzzy"])
    assert res.exit_code == 2 and "invalid policy" in res.output


def test_replay_writes_a_self_contained_html_report(golden, tmp_path):
    html = tmp_path / "r.html"
    with StubServer(StubConfig()) as stub:
        res = runner.invoke(app, ["replay", str(golden), "--server", stub.url, "--html", str(html), "-q"])
    assert res.exit_code == 0
    page = html.read_text()
    assert "g1/b1/t2" in page and "http://" not in page.split("</head>")[0]


def test_replay_can_launch_its_own_server(golden, tmp_path):
    res = runner.invoke(app, ["replay", str(golden), "--server", "http://127.0.0.1:9",
                              "--launch", "embedded-hicache", "-q"])
    assert res.exit_code == 2 and "exactly one of --server URL or --launch PROFILE" in res.output


def test_replay_of_one_shard_replays_only_its_groups(golden, tmp_path):
    res, doc = replay(golden, tmp_path, StubConfig(), "--shard", "2/2")
    assert res.exit_code == 0, res.output
    assert {r["id"].split("/")[0] for r in doc["requests"]} == {"g1"}


def test_record_has_no_update_option_since_golden_update_does_that(tmp_path):
    res = runner.invoke(app, ["record", "--server", "http://127.0.0.1:9", "--update", str(tmp_path)])
    assert res.exit_code == 2 and "No such option: --update" in res.output


def test_record_needs_an_output(tmp_path):
    res = runner.invoke(app, ["record", "--server", "http://127.0.0.1:9"])
    assert res.exit_code == 2 and "--out" in res.output


def test_record_into_a_new_directory_creates_it(tmp_path):
    out = tmp_path / "new" / "dir" / "g.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert out.is_dir()


def test_unwritable_report_path_is_a_one_line_error(golden, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with StubServer(StubConfig()) as stub:
        res = runner.invoke(app, ["replay", str(golden), "--server", stub.url, "-q",
                                  "--report", str(blocker / "r.json")])
    assert res.exit_code == 2 and "Traceback" not in res.output and "r.json" in res.output
