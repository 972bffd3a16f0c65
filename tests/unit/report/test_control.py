"""Attributing a replay's failures to the tier or to the control (replay/report/control.py)."""

import numpy as np

from replay.judge.diff import RequestDiff
from replay.report.control import attribute, control_note
from replay.report.document import report_dict
from replay.report.results import ReplayResult, RequestOutcome


def diff(status: str) -> RequestDiff:
    ok = status == "identical"
    return RequestDiff(status=status, compared=4, first=None, token_position=None, max_ulp=0 if ok else 9,
                       mean_kl=0.0, passed=ok, abs_delta=np.zeros(0), ulp=np.zeros(0, np.int64))


def outcome(id: str, status: str = "identical", cached: int = 512, digest: bytes = b"a",
            problem: str | None = None) -> RequestOutcome:
    return RequestOutcome(id=id, repeat=0, diff=diff(status), cached_tokens=cached,
                          cached_details={}, expected_min_cached=None, cache_problem=problem,
                          answer_digest=digest)


def result(*outcomes: RequestOutcome) -> ReplayResult:
    return ReplayResult(golden="g", server="s", policy="exact", repeats=1, expectation="any",
                        outcomes=list(outcomes))


def attributed(tested: list[RequestOutcome], control: list[RequestOutcome]) -> ReplayResult:
    r = result(*tested)
    attribute(r, result(*control), "launch:radix")
    return r


def test_a_failure_the_control_does_not_have_with_the_same_reuse_is_the_tiers_alone():
    r = attributed([outcome("a", "token_divergence", digest=b"x")], [outcome("a")])
    assert r.control["failed_on_tier_only"] == 1 and r.control["not_comparable"] == 0
    assert r.outcomes[0].control_passed is True and r.outcomes[0].control_same_bits is False


def test_a_failure_the_control_has_with_the_same_answer_is_also_on_it_with_the_same_bits():
    r = attributed([outcome("a", "logprob_drift", digest=b"x")],
                   [outcome("a", "logprob_drift", digest=b"x")])
    assert r.control["failed_on_control_too"] == 1 and r.control["same_bits_on_control"] == 1


def test_a_control_that_reused_other_kv_is_not_comparable():
    """The H200 run: the control's pool evicted what HiCache brought back from host, so it
    reused 512 tokens where the HiCache server reused 896, and its answer passed."""
    r = attributed([outcome("a", "token_divergence", cached=896)], [outcome("a", cached=512)])
    assert r.control["not_comparable"] == 1
    assert r.control["failed_on_tier_only"] == 0 and r.control["failed_on_control_too"] == 0
    doc = report_dict(r, golden="g", server="s", policy="exact")
    note = control_note(doc["requests"][0])
    assert note.startswith("not comparable: the control reused 512 cached tokens, this server 896")


def test_a_cache_miss_is_judged_by_the_controls_hit_whatever_it_reused():
    r = attributed([outcome("a", cached=0, problem="cached_tokens 0 not in [511, 512]")],
                   [outcome("a", cached=512)])
    assert r.control["failed_on_tier_only"] == 1 and r.control["not_comparable"] == 0


def test_passing_requests_and_requests_the_control_did_not_answer_carry_nothing():
    r = attributed([outcome("a"), outcome("b", "token_divergence")], [outcome("a")])
    assert all(o.control_status is None for o in r.outcomes)
    assert r.control["failed_on_tier_only"] == 0 and r.control["failed_on_control_too"] == 0


def test_every_request_of_a_report_with_a_control_has_the_control_fields():
    r = attributed([outcome("a"), outcome("b", "token_divergence")],
                   [outcome("a"), outcome("b", "token_divergence")])
    doc = report_dict(r, golden="g", server="s", policy="exact")
    keys = {"control_status", "control_passed", "control_same_bits", "control_cached_tokens"}
    assert all(keys <= set(q) for q in doc["requests"])
    assert doc["summary"]["failed_on_tier_only"] == 0 and doc["control"]["target"] == "launch:radix"


def test_the_summary_counts_the_tiers_failures_by_the_same_rule_as_the_control_object():
    r = attributed([outcome("a", "token_divergence", cached=896), outcome("b", "token_divergence")],
                   [outcome("a", cached=512), outcome("b")])
    doc = report_dict(r, golden="g", server="s", policy="exact")
    assert doc["summary"]["failed_on_tier_only"] == doc["control"]["failed_on_tier_only"] == 1
