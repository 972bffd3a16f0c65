"""The bitwise comparison of one request's outputs, and the policies that judge it."""

from dataclasses import dataclass

import numpy as np
import pytest

from replay.judge.diff import IDENTICAL, LOGPROB_DRIFT, TOKEN_DIVERGENCE, Policy, diff_outputs
from replay.utils.errors import UsageError

EXACT = Policy("exact")


@dataclass
class Out:
    output_ids: np.ndarray
    logprobs: np.ndarray
    top_ids: np.ndarray | None = None
    top_logprobs: np.ndarray | None = None


def outputs(n=6, k=3):
    ids = np.arange(10, 10 + n, dtype=np.int32)
    lps = np.array([np.float32(-0.1 * (i + 1)) for i in range(n)], dtype=np.float64)
    top_ids = np.stack([ids + 100 * j for j in range(k)], axis=1).astype(np.int32)
    top_ids[:, 0] = ids
    top_lps = np.stack([lps - j for j in range(k)], axis=1)
    return Out(ids, lps, top_ids, top_lps)


def copy(o):
    return Out(o.output_ids.copy(), o.logprobs.copy(), o.top_ids.copy(), o.top_logprobs.copy())


def one_ulp_up(x):
    return float(np.nextafter(np.float32(x), np.float32(np.inf)))


def test_identical_outputs_pass():
    g = outputs()
    d = diff_outputs(g, copy(g), EXACT)
    assert d.status == IDENTICAL and d.passed and d.first is None and d.compared == 6


def test_one_ulp_change_is_caught_at_its_position():
    g, r = outputs(), outputs()
    r.logprobs[3] = one_ulp_up(r.logprobs[3])
    d = diff_outputs(g, r, EXACT)
    assert d.status == LOGPROB_DRIFT and not d.passed
    assert d.first.position == 3 and d.first.ulp == 1 and d.first.kind == "logprob"


def test_sign_of_zero_is_caught():
    g, r = outputs(), outputs()
    g.logprobs[2] = 0.0
    r.logprobs[2] = -0.0
    d = diff_outputs(g, r, EXACT)
    assert d.status == LOGPROB_DRIFT and d.first.position == 2


def test_changed_token_is_caught_and_later_positions_are_not_compared():
    g, r = outputs(), outputs()
    r.output_ids[4] = 999
    r.logprobs[5] = -42.0  # after the divergence: not comparable, must not matter
    d = diff_outputs(g, r, EXACT)
    assert d.status == TOKEN_DIVERGENCE and d.first.position == 4 and d.first.kind == "token"
    assert d.first.golden_token == 14 and d.first.replay_token == 999
    assert d.compared == 5


def test_drift_before_a_token_divergence_is_reported_first():
    g, r = outputs(), outputs()
    r.logprobs[1] = one_ulp_up(r.logprobs[1])
    r.output_ids[4] = 999
    d = diff_outputs(g, r, EXACT)
    assert d.status == TOKEN_DIVERGENCE and d.first.position == 1


def test_top_k_value_change_is_caught():
    g, r = outputs(), outputs()
    r.top_logprobs[2, 1] = one_ulp_up(r.top_logprobs[2, 1])
    d = diff_outputs(g, r, EXACT)
    assert d.status == LOGPROB_DRIFT and d.first.position == 2 and d.first.kind == "top_k"


def test_top_k_tie_at_the_last_rank_broken_the_other_way_passes():
    g, r = outputs(), outputs()
    g.top_logprobs[1, 2] = g.top_logprobs[1, 1]  # ranks 2 and 3 tie ...
    r.top_logprobs[1, 2] = g.top_logprobs[1, 1]
    r.top_ids[1, 2] = 7777  # ... and the replay kept the other tied token
    assert diff_outputs(g, r, EXACT).status == IDENTICAL


def test_top_k_with_a_different_token_above_the_minimum_fails():
    g, r = outputs(), outputs()
    r.top_ids[1, 1] = 7777
    assert diff_outputs(g, r, EXACT).status == LOGPROB_DRIFT


def test_kl_policy_passes_small_drift_and_fails_large():
    g, r = outputs(), outputs()
    r.logprobs[3] = one_ulp_up(r.logprobs[3])
    assert diff_outputs(g, r, Policy.parse("kl:1e-9")).passed
    r.logprobs[3] = r.logprobs[3] - 0.5
    assert not diff_outputs(g, r, Policy.parse("kl:1e-9")).passed


def test_kl_policy_never_passes_a_token_divergence():
    g, r = outputs(), outputs()
    r.output_ids[0] = 999
    assert not diff_outputs(g, r, Policy.parse("kl:1e9")).passed


def test_ulp_policy_bounds_the_distance():
    g, r = outputs(), outputs()
    r.logprobs[3] = one_ulp_up(one_ulp_up(r.logprobs[3]))
    assert diff_outputs(g, r, Policy.parse("ulp:2")).passed
    assert not diff_outputs(g, r, Policy.parse("ulp:1")).passed


@pytest.mark.parametrize("text", ["", "kl", "kl:x", "ulp:-1", "ulp:1.5", "exact:3", "fuzzy"])
def test_invalid_policies_are_refused(text):
    with pytest.raises(UsageError):
        Policy.parse(text)


def test_length_mismatch_counts_as_token_divergence():
    g = outputs()
    r = Out(g.output_ids[:4].copy(), g.logprobs[:4].copy(), g.top_ids[:4].copy(),
            g.top_logprobs[:4].copy())
    d = diff_outputs(g, r, EXACT)
    assert d.status == TOKEN_DIVERGENCE and d.first.position == 4


def test_identical_outputs_take_the_short_path_and_report_like_the_full_one():
    from replay.judge import diff as diff_module

    rng = np.random.default_rng(5)
    ids = rng.integers(0, 100, 32).astype(np.int32)
    lps = -rng.random(32).astype(np.float32).astype(np.float64)
    top_ids = rng.integers(0, 100, (32, 4)).astype(np.int32)
    top_lps = -rng.random((32, 4)).astype(np.float32).astype(np.float64)

    class Out:
        def __init__(self) -> None:
            self.output_ids, self.logprobs = ids.copy(), lps.copy()
            self.top_ids, self.top_logprobs = top_ids.copy(), top_lps.copy()

    short = diff_module.diff_outputs(Out(), Out(), Policy("exact"))
    assert diff_module._identical(Out(), Out()) is not None
    full_path = diff_module._identical
    try:
        diff_module._identical = lambda g, r: None
        full = diff_module.diff_outputs(Out(), Out(), Policy("exact"))
    finally:
        diff_module._identical = full_path
    assert (short.status, short.compared, short.first, short.token_position, short.max_ulp,
            short.mean_kl, short.passed) == (full.status, full.compared, full.first,
                                             full.token_position, full.max_ulp, full.mean_kl,
                                             full.passed)
    assert short.abs_delta.size == full.abs_delta.size == 0


def test_an_unknown_policy_kind_is_refused_on_construction():
    with pytest.raises(UsageError, match="invalid policy kind 'fuzzy'"):
        Policy("fuzzy")


@pytest.mark.parametrize("text", ["exact", "kl:0.5", "ulp:3"])
def test_identical_values_pass_every_policy(text):
    assert Policy.parse(text).passes(identical=True, comparable=False, mean_kl=float("nan"),
                                     max_ulp=2**40)


@pytest.mark.parametrize("text", ["exact", "kl:1e9", "ulp:1000000"])
def test_values_that_are_not_comparable_fail_every_policy(text):
    assert not Policy.parse(text).passes(identical=False, comparable=False, mean_kl=0.0,
                                         max_ulp=0)


def test_exact_fails_any_difference_however_small():
    assert not EXACT.passes(identical=False, comparable=True, mean_kl=0.0, max_ulp=0)


def test_kl_bounds_the_mean_kl_and_refuses_a_nan():
    kl = Policy.parse("kl:0.5")
    assert kl.passes(identical=False, comparable=True, mean_kl=0.5, max_ulp=2**40)
    assert not kl.passes(identical=False, comparable=True, mean_kl=0.6, max_ulp=0)
    assert not kl.passes(identical=False, comparable=True, mean_kl=float("nan"), max_ulp=0)


def test_ulp_bounds_the_distance_and_needs_the_same_top_k_members():
    ulp = Policy.parse("ulp:3")
    assert ulp.passes(identical=False, comparable=True, mean_kl=9.0, max_ulp=3)
    assert not ulp.passes(identical=False, comparable=True, mean_kl=0.0, max_ulp=4)
    assert not ulp.passes(identical=False, comparable=True, mean_kl=0.0, max_ulp=1,
                          same_members=False)


@pytest.mark.parametrize("text", ["exact", "kl:1e-30", "kl:1", "ulp:1", "ulp:2"])
def test_the_prompt_and_the_output_diff_judge_the_same_drift_alike(text):
    from replay.judge.diff import diff_prompt_logprobs

    g, r = outputs(), outputs()
    r.logprobs[3] = one_ulp_up(one_ulp_up(r.logprobs[3]))
    policy = Policy.parse(text)
    assert (diff_outputs(g, r, policy).passed
            == diff_prompt_logprobs(g.logprobs, r.logprobs, policy).passed)
