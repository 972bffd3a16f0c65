"""The one report builder (replay/report/document.py): the summary and the verdict come from
the request entries, the same for a replay and for a merge."""

from __future__ import annotations

from replay.report.document import RunFacts, build_report, summary_of

STATUSES = ("identical", "server_id_mismatch", "cache_miss", "prompt_logprob_drift",
            "logprob_drift", "token_divergence")


def entry(i: int, status: str) -> dict:
    return {"id": f"g{i}/b0/t0", "repeat": 0, "status": status,
            "passed": status in ("identical", "server_id_mismatch"), "tokens_compared": 4,
            "max_ulp": 0 if status == "identical" else 3, "mean_kl": 0.0,
            "cache_problem": "short hit" if status == "cache_miss" else None,
            "prompt_logprobs": {"compared": 2, "identical": status != "prompt_logprob_drift"}}


def test_only_requests_whose_outputs_differ_count_as_diverged():
    """A server that misreported the prompt ids, a cache miss or a prompt-logprob drift had
    identical outputs: not diverged (the replay's count and the merge's once disagreed)."""
    summary = summary_of([entry(i, s) for i, s in enumerate(STATUSES)], RunFacts())
    assert summary["requests_diverged"] == 2
    assert (summary["requests_failed"], summary["cache_misses"], summary["prompt_logprob_drifts"]) == (4, 1, 1)


def test_the_verdict_is_pass_only_with_every_request_passed_and_no_problem():
    passing = [entry(0, "identical"), entry(1, "server_id_mismatch")]
    build = lambda requests, **facts: build_report(  # noqa: E731
        requests, RunFacts(**facts), golden="g", server="s", policy="exact")["verdict"]
    assert build(passing) == "pass"
    assert build(passing + [entry(2, "logprob_drift")]) == "fail"
    assert build(passing, tier_problem="no host hits") == "fail"
    assert build(passing, hit_problem="no hits") == "fail"
    doc = build_report(passing, RunFacts(), golden="g", server="s", policy="exact", error="gone")
    assert doc["verdict"] == "error" and doc["summary"]["requests"] == 2  # its requests judged
    doc = build_report(passing, RunFacts(), golden="g", server="s", policy="exact", error="gone",
                       partial=True)
    assert doc["verdict"] == "error" and doc["summary"] is None  # a shard's requests missing


def test_without_a_judged_run_the_document_is_an_error_with_no_requests():
    doc = build_report([], None, golden="g", server="s", policy="exact", error="unreachable")
    assert (doc["verdict"], doc["error"], doc["summary"], doc["requests"]) == (
        "error", "unreachable", None, [])
    assert len(doc["run_id"]) == 32
