"""Judging a replay made through a router: a miss the routing caused is explained, not failed;
a hit longer than allowed, or a miss a shared storage tier should have served, still fails; the
failing worker is named."""

from pathlib import Path

import numpy as np

from replay.golden.model import Golden
from replay.jobs.routing import apply_routing
from replay.judge.diff import RequestDiff
from replay.report.results import ReplayResult, RequestOutcome
from replay.server.topology import Topology, Worker, parse_topology


class LoggedTopology(Topology):
    """A topology whose router log is given as data (who served what)."""

    def __init__(self, sent: dict[str, list[int]], shared_storage: bool = False) -> None:
        profile = parse_topology("[topology]\nworker_profile = 'embedded-hicache'\n"
                                 f"shared_storage = {str(shared_storage).lower()}\n", name="t")
        super().__init__(profile, "http://router", Path("/nonexistent"),
                         [Worker(0, "http://w0", None), Worker(1, "http://w1", "host-bf16")])
        self.sent = sent

    def attribution(self) -> dict[str, list[int]]:
        return self.sent


class Node:
    def __init__(self, id: str, parent: int, new: int = 0, output: int = 0) -> None:
        self.id, self.parent, self.group = id, parent, 0
        self.new_tokens, self.output_ids = np.zeros(new, np.int32), np.zeros(output, np.int32)


def golden() -> Golden:
    return Golden(scenario={}, prefixes=[np.zeros(4, np.int32)], sampling={},
                  requests=[Node("g0/b0/t0", -1), Node("g0/b0/t1", 0)])


IDENTICAL = RequestDiff(status="identical", compared=4, first=None, token_position=None,
                        max_ulp=0, mean_kl=0.0, passed=True, abs_delta=np.zeros(0),
                        ulp=np.zeros(0, np.int64))


def outcome(id: str, cached: int, expected: int | None, problem: str | None) -> RequestOutcome:
    diff = IDENTICAL
    return RequestOutcome(id=id, repeat=0, diff=diff, cached_tokens=cached, cached_details={},
                          expected_min_cached=expected, cache_problem=problem)


def result(*outcomes: RequestOutcome) -> ReplayResult:
    return ReplayResult(golden="g", server="s", policy="exact", repeats=1, expectation="attention",
                        outcomes=list(outcomes))


def test_a_shortfall_on_another_worker_than_its_parent_is_a_routing_miss_not_a_failure():
    r = result(outcome("g0/b0/t0", 0, None, None), outcome("g0/b0/t1", 0, 128, "cached 0 < 128"))
    apply_routing(r, golden(), LoggedTopology({"g0/b0/t0": [0], "g0/b0/t1": [1]}))
    child = r.outcomes[1]
    assert child.passed and child.worker == 1 and "another worker" in child.routing_note
    assert r.routing["routing_misses"] == 1 and r.routing["hit_rate"] == 0.0


def test_a_shortfall_on_the_parents_own_worker_stays_a_failure():
    r = result(outcome("g0/b0/t0", 0, None, None), outcome("g0/b0/t1", 0, 128, "cached 0 < 128"))
    apply_routing(r, golden(), LoggedTopology({"g0/b0/t0": [1], "g0/b0/t1": [1]}))
    assert not r.outcomes[1].passed and r.outcomes[1].routing_note is None
    assert r.routing["failing_workers"] == [1]


def test_a_hit_longer_than_allowed_is_never_explained_by_routing():
    r = result(outcome("g0/b0/t0", 0, None, None),
               outcome("g0/b0/t1", 512, 128, "cached 512 > 200 possible"))
    apply_routing(r, golden(), LoggedTopology({"g0/b0/t0": [0], "g0/b0/t1": [1]}))
    assert not r.outcomes[1].passed


def test_with_a_shared_storage_tier_a_routed_shortfall_stays_a_failure():
    r = result(outcome("g0/b0/t0", 0, None, None), outcome("g0/b0/t1", 0, 128, "cached 0 < 128"))
    apply_routing(r, golden(), LoggedTopology({"g0/b0/t0": [0], "g0/b0/t1": [1]},
                                              shared_storage=True))
    assert not r.outcomes[1].passed


def test_the_hit_rate_counts_expected_hits_met_per_worker():
    r = result(outcome("g0/b0/t0", 0, None, None), outcome("g0/b0/t1", 128, 128, None))
    apply_routing(r, golden(), LoggedTopology({"g0/b0/t0": [0], "g0/b0/t1": [0]}))
    assert r.routing["hit_rate"] == 1.0
    assert [(w["index"], w["requests"], w["hits_met"]) for w in r.routing["per_worker"]] == \
        [(0, 2, 1), (1, 0, 0)]


class LoggedPDTopology(Topology):
    """A PD topology (prefill workers 0 and 1, decode worker 2) whose router log is data."""

    def __init__(self, sent: dict[str, list[tuple[int, int]]]) -> None:
        profile = parse_topology("[topology]\nkind = 'pd'\nprefill_profile = 'pd-cpu-prefill'\n"
                                 "decode_profile = 'pd-cpu-decode'\nprefill_workers = 2\n",
                                 name="t")
        super().__init__(profile, "http://router", Path("/nonexistent"),
                         [Worker(0, "http://p0", None, "prefill", 9000),
                          Worker(1, "http://p1", None, "prefill", 9001),
                          Worker(2, "http://d0", None, "decode")])
        self.sent = sent

    def pd_attribution(self) -> dict[str, list[tuple[int, int]]]:
        return self.sent


def pd_golden() -> Golden:
    """A 256-token prefix, turn 0 adds 64 and answers 160 tokens, turn 1 adds 16: pages of 128."""
    return Golden(scenario={}, prefixes=[np.zeros(256, np.int32)], sampling={},
                  requests=[Node("g0/b0/t0", -1, 64, 160), Node("g0/b0/t1", 0, 16, 8)])


def pd_result(*outcomes: RequestOutcome) -> ReplayResult:
    return ReplayResult(golden="g", server="s", policy="exact", repeats=1,
                        expectation="attention(page=128)", outcomes=list(outcomes))


def test_a_follow_up_hit_that_stops_at_its_parents_prompt_is_not_a_miss_through_pd():
    """The prefill worker computed the parent's 320-token prompt (256 of it in whole pages) but
    never its 160 output tokens: 256 is all it can reuse, though one server would reuse 384."""
    r = pd_result(outcome("g0/b0/t0", 0, None, None),
                  outcome("g0/b0/t1", 256, 384, "cached_tokens 256 not in [384, 479, 480]"))
    apply_routing(r, pd_golden(), LoggedPDTopology({"g0/b0/t0": [(0, 2)], "g0/b0/t1": [(0, 2)]}))
    child = r.outcomes[1]
    assert child.passed and child.expected_min_cached == 256
    assert "held its parent's prompt (320 tokens), never its 160 output tokens" in child.routing_note
    assert r.routing["prompt_only_hits"] == 1 and r.routing["routing_misses"] == 0


def test_a_follow_up_hit_short_of_its_parents_prompt_stays_a_miss_through_pd():
    r = pd_result(outcome("g0/b0/t0", 0, None, None),
                  outcome("g0/b0/t1", 128, 384, "cached_tokens 128 not in [384, 479, 480]"))
    apply_routing(r, pd_golden(), LoggedPDTopology({"g0/b0/t0": [(0, 2)], "g0/b0/t1": [(0, 2)]}))
    assert not r.outcomes[1].passed and r.outcomes[1].routing_note is None


def test_through_a_pd_router_each_request_names_both_halves():
    r = result(outcome("g0/b0/t0", 0, None, None), outcome("g0/b0/t1", 128, 128, None))
    apply_routing(r, golden(), LoggedPDTopology({"g0/b0/t0": [(0, 2)], "g0/b0/t1": [(0, 2)]}))
    assert [(o.prefill_worker, o.decode_worker, o.worker) for o in r.outcomes] == \
        [(0, 2, None), (0, 2, None)]
    assert r.routing["kind"] == "pd" and r.routing["attributed"] == 2
    assert [w["role"] for w in r.routing["workers"]] == ["prefill", "prefill", "decode"]


def test_the_hit_rules_judge_the_prefill_half_and_a_decode_worker_reuses_nothing():
    r = result(outcome("g0/b0/t0", 0, None, None), outcome("g0/b0/t1", 128, 128, None))
    apply_routing(r, golden(), LoggedPDTopology({"g0/b0/t0": [(0, 2)], "g0/b0/t1": [(0, 2)]}))
    per = {w["index"]: w for w in r.routing["per_worker"]}
    assert (per[0]["expected_hits"], per[0]["hits_met"], per[0]["cached_tokens"]) == (1, 1, 128)
    assert (per[2]["requests"], per[2]["expected_hits"], per[2]["cached_tokens"]) == (2, 0, 0)
    assert r.routing["hit_rate"] == 1.0


def test_a_shortfall_on_another_prefill_worker_than_its_parent_is_a_routing_miss():
    r = result(outcome("g0/b0/t0", 0, None, None), outcome("g0/b0/t1", 0, 128, "cached 0 < 128"))
    apply_routing(r, golden(), LoggedPDTopology({"g0/b0/t0": [(0, 2)], "g0/b0/t1": [(1, 2)]}))
    child = r.outcomes[1]
    assert child.passed and "prefill worker 1, its parent by prefill worker 0" in child.routing_note


def test_a_shortfall_on_the_parents_prefill_worker_stays_a_failure_named_by_its_pair():
    r = result(outcome("g0/b0/t0", 0, None, None), outcome("g0/b0/t1", 0, 128, "cached 0 < 128"))
    apply_routing(r, golden(), LoggedPDTopology({"g0/b0/t0": [(1, 2)], "g0/b0/t1": [(1, 2)]}))
    assert not r.outcomes[1].passed
    assert r.routing["failing_pairs"] == [{"prefill_worker": 1, "decode_worker": 2, "failed": 1}]
    assert r.routing["failing_workers"] == [1, 2]


def test_behind_mini_lb_every_request_has_the_only_pair():
    profile = parse_topology("[topology]\nkind = 'pd'\nprefill_profile = 'p'\n"
                             "decode_profile = 'd'\nrouter = 'mini-lb'\n", name="t")
    topology = Topology(profile, "http://router", Path("/nonexistent"),
                        [Worker(0, "http://p0", None, "prefill", 9000),
                         Worker(1, "http://d0", None, "decode")])
    r = result(outcome("g0/b0/t0", 0, None, None), outcome("g0/b0/t1", 128, 128, None))
    apply_routing(r, golden(), topology)
    assert [(o.prefill_worker, o.decode_worker) for o in r.outcomes] == [(0, 1), (0, 1)]
    assert r.routing["pd_router"] == "mini-lb" and r.routing["attributed"] == 2
