"""Judging a replay made through a router: who served each request, the hit rate the routing
achieved, and which misses the routing (not the cache) caused.

A worker can only reuse a prefix it holds. When the router sends a turn to another worker than
the one that served its parent, and no storage tier is shared between the workers, a shorter hit
than expected is the routing's doing: the outcome keeps its bits check (every token must still be
identical) but its cache shortfall becomes a `routing_note`, not a failure. A hit longer than the
expectation allows is never explained away, and with a shared storage tier a shortfall stays a
failure (the shared tier should have served it). Failing requests are counted per worker, so a
faulty worker behind a healthy router is named.
"""

from __future__ import annotations

from typing import Any

from replay.golden.model import Golden
from replay.report.results import ReplayResult, RequestOutcome
from replay.server.topology import Topology


def apply_routing(result: ReplayResult, golden: Golden, topology: Topology) -> None:
    """Attribute every outcome to its worker (from the router's log) and judge the routing."""
    sent = topology.attribution()
    index = {r.id: i for i, r in enumerate(golden.requests)}
    served: dict[tuple[str, int], int] = {}
    for o in result.outcomes:
        workers = sent.get(o.id, [])
        if o.repeat < len(workers):
            o.worker = workers[o.repeat]
            served[(o.id, o.repeat)] = o.worker
    for o in result.outcomes:
        parent = golden.requests[index[o.id]].parent if o.id in index else -1
        if parent < 0 or o.worker is None:
            continue
        parent_worker = served.get((golden.requests[parent].id, o.repeat))
        if parent_worker is None or parent_worker == o.worker:
            continue
        if _shortfall(o) and not topology.profile.shared_storage:
            o.routing_note = (f"served by worker {o.worker}, its parent by worker "
                              f"{parent_worker}: the prefix was on another worker (a miss the "
                              f"routing caused, not a cache bug; was: {o.cache_problem})")
            o.cache_problem = None
    result.siblings_share_storage = topology.profile.shared_storage
    result.routing = routing_summary(result.outcomes, topology, attributed=len(served))


def _shortfall(o: RequestOutcome) -> bool:
    return (o.cache_problem is not None and o.expected_min_cached is not None
            and o.cached_tokens < o.expected_min_cached)


def routing_summary(outcomes: list[RequestOutcome], topology: Topology,
                    attributed: int) -> dict[str, Any]:
    """The report's `routing` object (docs/report.md)."""
    per_worker = []
    for w in topology.workers:
        mine = [o for o in outcomes if o.worker == w.index]
        expecting = [o for o in mine if o.expected_min_cached]
        per_worker.append({
            "index": w.index, "url": w.url, "fault": w.fault, "requests": len(mine),
            "failed": sum(1 for o in mine if not o.passed),
            "cached_tokens": sum(o.cached_tokens for o in mine),
            "expected_hits": len(expecting),
            "hits_met": sum(1 for o in expecting if o.cached_tokens >= o.expected_min_cached),
        })
    expecting = [o for o in outcomes if o.expected_min_cached]
    met = sum(1 for o in expecting if o.cached_tokens >= o.expected_min_cached)
    return {
        **topology.describe(),
        "attributed": attributed, "outcomes": len(outcomes),
        "expected_hits": len(expecting), "hits_met": met,
        "hit_rate": round(met / len(expecting), 4) if expecting else None,
        "routing_misses": sum(1 for o in outcomes if o.routing_note),
        "per_worker": per_worker,
        "failing_workers": [w["index"] for w in per_worker if w["failed"]],
    }
