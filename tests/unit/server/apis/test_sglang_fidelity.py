"""What SGLang 0.5.23 reports and expects, read and honoured by the client (issue: real SGLang)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.jobs import session
from replay.server.apis.base import Completion
from replay.judge.cache_check import CacheExpectation
from replay.server.transport import ClientOptions
from replay.golden.store import read_golden
from replay.run.replayer import ReplayOptions, judge, retraction_lag
from replay.golden.scenario import ScenarioSpec
from tests.support.goldens import record_spec
from tests.support.stub_server import StubConfig, StubServer

SPEC = ScenarioSpec(name="fid", groups=1, branches=2, prefix_len=40, suffix_len=4, turns=1,
                    turn_suffix_len=4, max_new_tokens=6, top_k=2, seed=5)


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    return record_spec(tmp_path_factory.mktemp("fidelity"), SPEC)


def _replay(golden: Path, config: StubConfig, **kwargs):
    with StubServer(config) as stub:
        doc = session.replay_golden(golden, session.ServerTarget(url=stub.url), **kwargs)
    return doc, stub


def test_flush_asks_the_server_to_wait_until_idle(golden):
    doc, stub = _replay(golden, StubConfig())
    assert doc["verdict"] == "pass" and stub.flush_queries == ["timeout=30"]


def test_a_server_without_storage_is_not_asked_to_clear_it(golden):
    doc, stub = _replay(golden, StubConfig())
    assert stub.storage_clears == [] and doc["storage_cleared"] == 0


def test_l3_storage_is_cleared_before_every_repeat(golden):
    config = StubConfig(extra_server_info={"hicache_storage_backend": "file"})
    doc, stub = _replay(golden, config, options=ReplayOptions(repeat=3))
    assert doc["verdict"] == "pass" and doc["storage_cleared"] == 3 and len(stub.storage_clears) == 3


def test_the_clear_carries_the_admin_key_when_given(golden):
    config = StubConfig(extra_server_info={"hicache_storage_backend": "file"})
    _, stub = _replay(golden, config, client=ClientOptions(admin_api_key="adm1n"))
    assert stub.storage_clears == ["Bearer adm1n"]


def test_a_first_branch_served_from_storage_after_a_clear_is_flagged_not_its_siblings(golden):
    """g0/b1/t0 may reuse from L3 what g0/b0/t0 wrote there in the same repeat (seen on every
    real L3 backend: the warning used to name those siblings too)."""
    def stale(n, ids, resp):
        resp["meta_info"]["cached_tokens_details"] = {"device": 0, "host": 0, "storage": 16}
        resp["meta_info"]["cached_tokens"] = max(resp["meta_info"]["cached_tokens"], 16)
        return resp

    config = StubConfig(extra_server_info={"hicache_storage_backend": "file"}, tamper=stale)
    doc, _ = _replay(golden, config, options=ReplayOptions(expect_cache="none"))
    assert {h["id"] for h in doc["storage_hits_after_clear"]} == {"g0/b0/t0"}
    assert "L3" in doc["warnings"][0]


def test_an_api_key_refusal_says_which_option_to_use(golden):
    doc, _ = _replay(golden, StubConfig(auth_status=401))
    assert doc["verdict"] == "error" and "--api-key or set GOLDEN_API_KEY" in doc["error"]


def test_preferred_sampling_params_that_change_outputs_are_refused(golden):
    config = StubConfig(extra_model_info={"preferred_sampling_params": {"repetition_penalty": 1.2}})
    doc, _ = _replay(golden, config)
    assert doc["verdict"] == "error" and "repetition_penalty=1.2" in doc["error"]


def test_preferred_sampling_params_we_override_are_accepted(golden):
    config = StubConfig(extra_model_info={"preferred_sampling_params": {"temperature": 0.7}})
    doc, _ = _replay(golden, config)
    assert doc["verdict"] == "pass"


def test_retractions_are_reported_per_request(golden):
    doc, _ = _replay(golden, StubConfig(retractions=2))
    assert {r["num_retractions"] for r in doc["requests"]} == {2}
    assert doc["summary"]["retracted_requests"] == SPEC.requests


def _child_outcome(golden_path: Path, cached: int, lag: int):
    g = read_golden(golden_path)
    i = next(j for j, r in enumerate(g.requests) if r.turn == 1)
    inputs = [len(g.input_ids(j)) for j in range(len(g.requests))]
    r = g.requests[i]
    completion = Completion(output_ids=r.output_ids, logprobs=r.logprobs, top_ids=r.top_ids,
                            top_logprobs=r.top_logprobs, cached_tokens=cached)
    return judge(g, i, inputs, completion, 0, ReplayOptions().policy,
                 CacheExpectation("mamba", interval=16), lag)


def test_a_child_of_a_retracted_request_may_lag_by_less_than_a_chunk(golden):
    # parent input 44 + output 6 = 50 tokens: the strict mamba floor is 48
    assert _child_outcome(golden, 40, lag=0).cache_problem is not None
    relaxed = _child_outcome(golden, 40, lag=15)
    assert relaxed.cache_problem is None and relaxed.expected_min_cached == 33


def test_the_lag_is_one_prefill_chunk_minus_one():
    assert retraction_lag({"chunked_prefill_size": 2048}, CacheExpectation("mamba", interval=128)) == 2047
    assert retraction_lag({}, CacheExpectation("mamba", interval=128)) == 127


def test_the_lag_is_applied_only_after_the_parent_was_retracted(golden):
    doc, _ = _replay(golden, StubConfig(retractions=0))
    assert all(r["retraction_lag"] == 0 for r in doc["requests"])
    doc, _ = _replay(golden, StubConfig(retractions=1, extra_server_info={"chunked_prefill_size": 64}),
                     options=ReplayOptions(expect_cache="mamba:16"))
    lags = {r["id"]: r["retraction_lag"] for r in doc["requests"]}
    assert lags["g0/b0/t0"] == 0 and lags["g0/b0/t1"] == 63
