"""The yardstick at CI size: every injected cache bug is caught by the ci-quick preset, only on
requests that were served from the cache, and a clean cached replay passes (no false
positives), under forced retraction and jitter too."""

from dataclasses import replace

import pytest

from replay.engine.config import get_config
from replay.engine.faults import FAULTS
from replay.engine.model import HybridModel
from replay.golden.scenario import PRESETS
from replay.jobs.detection import (BEYOND_REPLAY, CI_QUICK, CI_QUICK_ENGINE, fault_report,
                                   judge_fault, profile_for, record_reference, recorded,
                                   replay_report)
from replay.judge.cache_check import CacheExpectation

# 3 groups x 2 branches x 2 turns: group 0 salted, group 2 with prompt logprobs, group 1 plain.
SPEC = PRESETS[CI_QUICK]
# Without the per-group switches: what a golden of output logprobs alone sees.
PLAIN = replace(SPEC, name="ci-quick-plain", salted=0, prompt_logprobs=0)
POOL = dict(CI_QUICK_ENGINE)  # pages travel to host and back


@pytest.fixture(scope="module")
def model() -> HybridModel:
    return HybridModel(get_config("tiny"), 0, "cpu")


@pytest.fixture(scope="module")
def recordings(model) -> dict:
    """Recordings by scenario, shared by the tests (`fault_report` fills it)."""
    return {}


@pytest.fixture(scope="module")
def golden(model, recordings):
    return recorded(SPEC, model, recordings)


@pytest.fixture(scope="module")
def plain(model):
    return record_reference(PLAIN, model)


def test_clean_cached_replay_passes_twice_in_a_row(golden, model):
    report = replay_report(golden, model, "hicache", repeat=2, **POOL)
    assert report["verdict"] == "pass", report["summary"]
    summary = report["summary"]
    assert max(int(k) for k in summary["cache_hit_lengths"]) >= 256  # really served from cache
    assert summary["cached_tokens_by_tier"].get("host", 0) > 0
    assert summary["prompt_logprobs_compared"] > 0


def test_salted_requests_reuse_nothing_and_the_others_still_hit(golden, model):
    report = replay_report(golden, model, "hicache", **POOL)
    by_group = {g: [r["cached_tokens"] for r in report["requests"] if r["id"].startswith(f"g{g}/")]
                for g in (0, 1)}
    assert set(by_group[0]) == {0} and max(by_group[1]) >= 256


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_is_caught_only_on_cached_requests(recordings, model, fault):
    """Each fault replayed as detection.FAULT_SETUPS says (profile, scenario switches, load)."""
    report = fault_report(SPEC, model, fault, recordings, **POOL)
    outcome = judge_fault(fault, profile_for(fault), report)
    assert outcome.caught, f"{fault} was not caught"
    assert outcome.placed, f"{fault} failed requests with no cache hit: {outcome.cold_failures}"


@pytest.mark.parametrize("fault", sorted(BEYOND_REPLAY))
def test_a_fault_needing_a_scenario_switch_is_beyond_a_plain_golden(plain, model, fault):
    """Output logprobs alone never take the prompt-logprob path, and requests without cache
    keys cannot be wrongly shared across keys: the replay passes (docs/faults.md: the seed kit
    does not see either); the golden needs `prompt_logprobs` or `salted`."""
    report = replay_report(plain, model, profile_for(fault), fault, **POOL)
    assert report["verdict"] == "pass", report["summary"]


def test_host_load_race_passes_at_concurrency_1(golden, model):
    """The race needs another request's compute beside the load: one request at a time hides
    it, which is why replays run concurrently by default (docs/faults.md)."""
    report = replay_report(golden, model, "hicache", "host-load-race", concurrency=1, **POOL)
    assert report["verdict"] == "pass", report["summary"]
    assert report["summary"]["cached_tokens_by_tier"].get("host", 0) > 0


def test_replay_under_forced_retraction_and_jitter_stays_exact_and_uses_the_lag_rule(plain,
                                                                                      model):
    """Retracting a decoding request every 7 steps and jittering the schedule changes no bit;
    a retracted parent's resumed prefill keeps no checkpoint at the boundaries inside it, so
    some child hit lags the plain mamba bound and passes only by SGLang's checkpoint-lag rule."""
    report = replay_report(plain, model, "hicache", test_retract_interval=7,
                           schedule_jitter_seed=1, **POOL)
    assert report["verdict"] == "pass", report["summary"]
    assert report["summary"]["retracted_requests"] > 0
    bound = CacheExpectation("mamba", page_size=64, interval=128)
    lagged = []
    for r in report["requests"]:
        req = plain.requests[plain.index(r["id"])]
        if req.parent < 0:
            continue
        floor = bound.minimum(len(plain.input_ids(req.parent)),
                              len(plain.requests[req.parent].output_ids))
        if r["cached_tokens"] < floor:
            lagged.append(r["id"])
            assert r["retraction_lag"] > 0, r
    assert lagged, "no hit lagged: the retraction rule was not exercised"
