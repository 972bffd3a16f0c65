"""The yardstick at CI size: every injected cache bug is caught, only on requests that were
served from the cache, and a clean cached replay passes (no false positives)."""

import pytest

from replay.engine.config import get_config
from replay.jobs.detection import (BEYOND_REPLAY, judge_fault, profile_for, record_reference,
                              replay_report)
from replay.engine.faults import FAULTS
from replay.engine.model import HybridModel
from replay.golden.scenario import ScenarioSpec

# 2 groups x 2 branches x 3 turns; 144 new tokens cross the 128-token track boundary in turn 0.
MINI = ScenarioSpec(name="mini-branching", groups=2, branches=2, prefix_len=128, suffix_len=32,
                    turns=2, turn_suffix_len=16, max_new_tokens=144, top_k=5)
# The profiles' device pools are sized for hicache-branching; a pool this small makes the mini
# scenario's pages travel to host and back too.
POOL = {"max_total_tokens": 768}


@pytest.fixture(scope="module")
def model() -> HybridModel:
    return HybridModel(get_config("tiny"), 0, "cpu")


@pytest.fixture(scope="module")
def golden(model):
    return record_reference(MINI, model)


def test_clean_cached_replay_passes_twice_in_a_row(golden, model):
    report = replay_report(golden, model, "hicache", repeat=2, **POOL)
    assert report["verdict"] == "pass", report["summary"]
    hits = {int(k) for k in report["summary"]["cache_hit_lengths"]}
    assert max(hits) >= 256  # turn >= 1 requests were really served from the cache
    assert report["summary"]["cached_tokens_by_tier"].get("host", 0) > 0


@pytest.mark.parametrize("fault", sorted(set(FAULTS) - BEYOND_REPLAY))
def test_fault_is_caught_only_on_cached_requests(golden, model, fault):
    profile = profile_for(fault)
    outcome = judge_fault(fault, profile, replay_report(golden, model, profile, fault, **POOL))
    assert outcome.caught, f"{fault} was not caught"
    assert outcome.placed, f"{fault} failed requests with no cache hit: {outcome.cold_failures}"


@pytest.mark.parametrize("fault", sorted(BEYOND_REPLAY))
def test_fault_on_the_prompt_logprob_path_is_beyond_a_replay(golden, model, fault):
    """A replay asks for output logprobs only, so this path is never taken: the replay passes
    (docs/faults.md: the seed kit does not see it either)."""
    report = replay_report(golden, model, profile_for(fault), fault, **POOL)
    assert report["verdict"] == "pass", report["summary"]
