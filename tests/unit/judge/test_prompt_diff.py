"""Prompt logprobs are diffed bit for bit like output logprobs; the cache rules cap a hit at
logprob_start_len and keep salted requests apart."""

import numpy as np

from replay.judge.cache_check import CacheExpectation, isolation_problem
from replay.judge.diff import Policy, diff_prompt_logprobs

EXACT = Policy("exact")
GOLDEN = np.array([-1.5, -2.25, -0.125])


def test_identical_prompt_logprobs_pass():
    d = diff_prompt_logprobs(GOLDEN, GOLDEN.copy(), EXACT)
    assert d.identical and d.passed and d.compared == 3


def test_one_flipped_bit_fails_exact_and_names_the_position():
    replay = GOLDEN.copy()
    replay[1] = np.nextafter(replay[1], 0)
    d = diff_prompt_logprobs(GOLDEN, replay, EXACT)
    assert not d.passed and d.first_position == 1 and d.ulp > 0
    assert diff_prompt_logprobs(GOLDEN, replay, Policy("ulp", max_ulp=2**40)).passed


def test_missing_or_short_prompt_logprobs_never_pass():
    assert not diff_prompt_logprobs(GOLDEN, None, Policy("kl", kl_threshold=1.0)).passed
    assert not diff_prompt_logprobs(GOLDEN, GOLDEN[:2], Policy("ulp", max_ulp=9)).passed


def test_a_hit_past_logprob_start_len_is_a_problem():
    mamba = CacheExpectation("mamba", page_size=64, interval=128)
    assert mamba.problem(turn=1, history=576, output=160, cached=640, prompt=768, cap=576)
    assert mamba.problem(turn=1, history=576, output=160, cached=512, prompt=768, cap=576) is None


def test_the_cap_lowers_the_least_hit_to_the_last_boundary_before_it():
    mamba = CacheExpectation("mamba", page_size=64, interval=128)
    assert mamba.minimum(576, 160) == 640
    assert mamba.minimum(576, 160, cap=576) == 512


def test_a_salted_request_may_reuse_nothing():
    assert isolation_problem(0, "salt-g0/b0/t1") is None
    assert "across cache keys" in isolation_problem(64, "salt-g0/b0/t1")
