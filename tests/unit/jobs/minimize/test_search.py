"""The minimizer's search, judged by fake judges: what it keeps, what it proves, when it stops.

A fake judge is a predicate over the candidate (kept request ids and options); the search never
sees a server. The end-to-end proof on the embedded engine is tests/integration/test_minimize_cmd.py.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.utils.errors import UsageError
from replay.jobs.minimize.search import Budget, Candidate, Judgement, NotFailing, Search, ddmin, parse_budget
from replay.jobs.minimize.session import Failure, request_class
from replay.golden.scenario import ScenarioSpec, build_plan
from replay.golden.tree import input_ids, subset, with_ancestors

SPEC = ScenarioSpec(name="t", groups=3, branches=3, prefix_len=4, suffix_len=2, turns=2,
                    turn_suffix_len=1, max_new_tokens=2)
NODES = build_plan(SPEC).requests  # 27 nodes, 9 conversations of 3 turns
START = Candidate(keep=tuple(range(len(NODES))), schedule="lockstep", concurrency=16, repeat=1)


class FakeJudge:
    """Fails when `predicate(ids, candidate)` holds; records every candidate it was asked about."""

    def __init__(self, predicate: Callable[[set[str], Candidate], bool],
                 failed_repeats: Callable[[Candidate], int] | None = None) -> None:
        self.predicate = predicate
        self.failed_repeats = failed_repeats or (lambda c: c.repeat)
        self.seen: list[Candidate] = []

    def __call__(self, cand: Candidate) -> Judgement:
        self.seen.append(cand)
        fails = self.predicate(ids_of(cand), cand)
        return Judgement(fails=fails, failed_repeats=self.failed_repeats(cand) if fails else 0)


def ids_of(cand: Candidate) -> set[str]:
    return {NODES[i].id for i in cand.keep}


def conversations(ids: set[str]) -> set[str]:
    return {i.rsplit("/", 1)[0] for i in ids}


def minimize(predicate, start: Candidate = START, **kwargs):
    judge = FakeJudge(predicate, kwargs.pop("failed_repeats", None))
    return Search(NODES, judge, **kwargs).run(start), judge


def without(cand: Candidate, gone: list[int]) -> Candidate:
    keep = with_ancestors(NODES, [i for i in cand.keep if i not in gone])
    return Candidate(tuple(keep), cand.schedule, cand.concurrency, cand.repeat)


def assert_one_minimal(result, predicate) -> None:
    """Removing any one conversation, or any one conversation's last turn, passes."""
    keep = result.final.keep
    by_conv: dict[tuple[int, int], list[int]] = {}
    for i in keep:
        by_conv.setdefault((NODES[i].group, NODES[i].branch), []).append(i)
    for conv in by_conv.values():
        conv.sort(key=lambda i: NODES[i].turn)
        for gone in (conv, conv[-1:]):
            trial = without(result.final, gone)
            assert not (trial.keep and predicate(ids_of(trial), trial)), \
                f"removing {[NODES[i].id for i in gone]} still fails"


# -- the tree subset ------------------------------------------------------------------------


def test_subset_keeps_ancestors_and_remaps_parents():
    kept = subset(NODES, [NODES.index(next(n for n in NODES if n.id == "g1/b2/t2"))])
    assert [n.id for n in kept] == ["g1/b2/t0", "g1/b2/t1", "g1/b2/t2"]
    assert [n.parent for n in kept] == [-1, 0, 1]


def test_subset_inputs_are_the_originals():
    prefixes = build_plan(SPEC).prefixes
    outputs = {n.id: np.array([7, len(n.id)], dtype=np.int32) for n in NODES}
    keep = [i for i, n in enumerate(NODES) if n.id in ("g0/b1/t2", "g2/b0/t1")]
    kept = subset(NODES, keep)
    for j, node in enumerate(kept):
        i = next(k for k, n in enumerate(NODES) if n.id == node.id)
        assert np.array_equal(input_ids(kept, prefixes, lambda x: outputs[kept[x].id], j),
                              input_ids(NODES, prefixes, lambda x: outputs[NODES[x].id], i))


# -- ddmin and the search -------------------------------------------------------------------


def test_ddmin_finds_the_two_culprits_of_eight():
    assert ddmin(list(range(8)), lambda units: {2, 5} <= set(units)) == [2, 5]


@settings(max_examples=40, deadline=None)
@given(culprits=st.sets(st.sampled_from([n.id for n in NODES]), min_size=1, max_size=4))
def test_a_failure_caused_by_some_requests_shrinks_to_exactly_them_and_their_ancestors(culprits):
    result, _ = minimize(lambda ids, c: culprits <= ids)
    expected = {NODES[i].id for i in with_ancestors(
        NODES, [i for i, n in enumerate(NODES) if n.id in culprits])}
    assert ids_of(result.final) == expected
    assert result.one_minimal and not result.budget_exhausted


def test_a_failure_that_needs_cache_pressure_keeps_just_enough_conversations():
    # A host-tier bug: g0/b0's turn 1 fails only when at least 4 conversations push it to host.
    def predicate(ids, c):
        return "g0/b0/t1" in ids and len(conversations(ids)) >= 4

    result, _ = minimize(predicate)
    ids = ids_of(result.final)
    assert "g0/b0/t1" in ids and len(conversations(ids)) == 4
    assert_one_minimal(result, predicate)


def test_every_candidate_is_ancestor_closed_and_judged_once_then_the_result_once_more():
    result, judge = minimize(lambda ids, c: "g2/b1/t2" in ids and len(ids) > 5)
    for cand in judge.seen:
        assert cand.keep and set(with_ancestors(NODES, cand.keep)) == set(cand.keep)
    search, rerun = judge.seen[:-1], judge.seen[-1]
    assert len(search) == len(set(search)) == result.replays - 1
    assert rerun == result.final and result.reproduced


def test_a_failure_that_vanishes_during_the_search_is_not_reproduced_nor_minimal():
    judged = []

    def predicate(ids, c):  # fails for the first five replays only, whatever they keep
        judged.append(c)
        return len(judged) <= 5

    result, judge = minimize(predicate)
    assert judge.seen[-1] == result.final and not result.reproduced
    assert not result.one_minimal and result.verdict == "not reproduced"


def test_a_result_that_fails_in_fewer_repeats_on_its_rerun_is_flaky():
    seen: set[Candidate] = set()

    def failed_repeats(c: Candidate) -> int:  # every repeat the first time, one on a rerun
        again = c in seen
        seen.add(c)
        return 1 if again else c.repeat

    result, _ = minimize(lambda ids, c: "g0/b0/t0" in ids and c.repeat == 3,
                         Candidate(START.keep, "lockstep", 1, 3), failed_repeats=failed_repeats)
    assert result.judgement.failed_repeats == 3 and result.rerun.failed_repeats == 1
    assert result.reproduced and result.flaky


def test_trailing_turns_go_when_the_failure_is_in_an_early_turn():
    result, _ = minimize(lambda ids, c: "g1/b1/t1" in ids)
    assert ids_of(result.final) == {"g1/b1/t0", "g1/b1/t1"}


def test_a_start_that_does_not_fail_is_called_flaky():
    with pytest.raises(NotFailing, match="flaky.*--repeat"):
        minimize(lambda ids, c: False)


# -- options --------------------------------------------------------------------------------


def test_a_simpler_schedule_and_one_request_at_a_time_are_kept_when_they_still_fail():
    start = Candidate(START.keep, "dag", 16, 1)
    result, _ = minimize(lambda ids, c: "g0/b0/t1" in ids, start=start)
    assert (result.final.schedule, result.final.concurrency) == ("lockstep", 1)
    options = next(s for s in result.steps if s.name == "options")
    assert "schedule dag -> lockstep" in options.removed


def test_the_lowest_concurrency_that_still_fails_is_found():
    result, _ = minimize(lambda ids, c: "g0/b0/t1" in ids and c.concurrency >= 4)
    assert result.final.concurrency == 4


def test_one_repeat_is_enough_when_every_repeat_failed():
    start = Candidate(START.keep, "lockstep", 16, 5)
    result, _ = minimize(lambda ids, c: "g0/b0/t1" in ids, start=start)
    assert result.final.repeat == 1 and not result.flaky


def test_a_flaky_failure_keeps_its_repeats_and_says_so():
    start = Candidate(START.keep, "lockstep", 16, 5)
    result, _ = minimize(lambda ids, c: "g0/b0/t1" in ids, start=start,
                         failed_repeats=lambda c: 1)
    assert result.final.repeat == 5 and result.flaky


# -- budget ---------------------------------------------------------------------------------


def test_a_run_budget_stops_the_search_with_the_best_failing_replay_so_far():
    def predicate(ids, c):
        return "g0/b0/t1" in ids

    result, judge = minimize(predicate, budget=Budget(runs=4))
    assert result.replays == len(judge.seen) == 5  # 4, and the rerun of the result
    assert result.budget_exhausted and not result.one_minimal
    assert predicate(ids_of(result.final), result.final)
    assert len(result.final.keep) < len(NODES)


@pytest.mark.parametrize("text, budget", [
    ("600", Budget(seconds=600)), ("90s", Budget(seconds=90)), ("10m", Budget(seconds=600)),
    ("1h", Budget(seconds=3600)), ("40runs", Budget(runs=40)), ("1 run", Budget(runs=1)),
    (None, Budget()),
])
def test_parse_budget(text, budget):
    assert parse_budget(text) == budget


@pytest.mark.parametrize("text", ["", "0", "-5", "ten", "2.5runs", "5 days"])
def test_a_bad_budget_is_a_usage_error(text):
    with pytest.raises(UsageError, match="--budget"):
        parse_budget(text)


# -- what "fails the same way" means ---------------------------------------------------------


def report_of(*requests: tuple[str, str, str | None, dict[str, int]], tier_problem=None):
    rows = [{"id": i, "repeat": 0, "status": status, "passed": status == "identical",
             "cache_problem": problem, "cached_tokens": sum(tiers.values()),
             "cached_tokens_details": tiers} for i, status, problem, tiers in requests]
    failed = any(not r["passed"] for r in rows) or tier_problem
    return {"verdict": "fail" if failed else "pass", "requests": rows,
            "tier_problem": tier_problem}


def test_the_failure_kept_is_the_most_frequent_class():
    report = report_of(("a", "logprob_drift", None, {}), ("b", "token_divergence", None, {}),
                       ("c", "token_divergence", None, {}), ("d", "identical", None, {}))
    assert Failure.of(report) == Failure("token_divergence")
    assert Failure.of(report, "logprob_drift") == Failure("logprob_drift")


def test_an_over_reported_hit_is_its_own_class():
    report = report_of(("a", "cache_miss", "cached_tokens 9 >= prompt length 9: over-reported",
                        {"device": 9}), ("b", "cache_miss", "cached_tokens 0 < 128", {}))
    assert [request_class(r) for r in report["requests"]] == ["over_reported", "cache_miss"]


def test_same_tier_keeps_the_host_tier_of_the_failing_hits():
    report = report_of(("a", "logprob_drift", None, {"device": 512, "host": 128}),
                       ("b", "logprob_drift", None, {"device": 640}))
    failure = Failure.of(report, same_tier=True)
    assert failure.tiers == ("host",)
    assert [r["id"] for r in failure.matching(report)] == ["a"]


def test_a_passing_report_has_no_failure_to_minimize():
    with pytest.raises(NotFailing, match="passed"):
        Failure.of(report_of(("a", "identical", None, {})))


def test_an_unknown_failure_class_is_a_usage_error():
    with pytest.raises(UsageError, match="--failure"):
        Failure("slow")


def test_the_start_is_rerun_whatever_the_budget():
    result, judge = minimize(lambda ids, c: "g0/b0/t1" in ids, budget=Budget(seconds=1e-9))
    assert judge.seen == [START, START] and result.final == START and result.budget_exhausted
