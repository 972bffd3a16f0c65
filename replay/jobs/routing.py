"""Judging a replay made through a router: who served each request, the hit rate the routing
achieved, and which misses the routing (not the cache) caused.

A worker can only reuse a prefix it holds. When the router sends a turn to another worker than
the one that served its parent, and no storage tier is shared between the workers, a shorter hit
than expected is the routing's doing: the outcome keeps its bits check (every token must still be
identical) but its cache shortfall becomes a `routing_note`, not a failure. A hit longer than the
expectation allows is never explained away, and with a shared storage tier a shortfall stays a
failure (the shared tier should have served it). Failing requests are counted per worker, so a
faulty worker behind a healthy router is named.

Through a prefill/decode-disaggregated topology each request has two workers: the prefill worker
computed (and reused) its prompt's KV, the decode worker received that KV and generated. Prefix
reuse happens only on the prefill side, so the hit rules judge that half: SGLang's decode worker
reports the prefill worker's hit as the request's `cached_tokens` (a transferred prompt is not
a hit, and not a miss either), and a routing miss is a turn whose prefill worker is not its
parent's. A prefill worker never sees its requests' outputs (they are decoded on the decode
worker), so a follow-up turn may reuse its parent's prompt but not its parent's output: its
expected hit is the rule applied to the parent's prompt alone, and a hit that stops there is a
`routing_note`, not a miss (`prompt_only_hits`). Failures are counted per worker and per
(prefill, decode) pair, so a faulty transfer between two workers is named as that pair.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from replay.golden.model import Golden
from replay.judge.cache_check import CacheExpectation
from replay.report.results import ReplayResult, RequestOutcome
from replay.server.pd_topology import MINI_LB, PD_KIND
from replay.server.topology import DECODE, Topology


def apply_routing(result: ReplayResult, golden: Golden, topology: Topology) -> None:
    """Attribute every outcome to its worker (from the router's log) and judge the routing."""
    if topology.profile.kind == PD_KIND:
        apply_pd_routing(result, golden, topology)
        return
    sent = topology.attribution()
    served: dict[tuple[str, int], int] = {}
    for o in result.outcomes:
        workers = sent.get(o.id, [])
        if o.repeat < len(workers):
            o.worker = workers[o.repeat]
            served[(o.id, o.repeat)] = o.worker
    explain_routing_misses(result, golden, topology, served, lambda o: o.worker)
    result.routing = routing_summary(result.outcomes, topology, attributed=len(served))


def apply_pd_routing(result: ReplayResult, golden: Golden, topology: Topology) -> None:
    """Both halves of every outcome; the hit rules judge the prefill half (module docstring)."""
    sent = topology.pd_attribution()
    sole = topology.sole_pair() if topology.profile.router == MINI_LB else None
    served: dict[tuple[str, int], int] = {}
    for o in result.outcomes:
        pairs = sent.get(o.id, [])
        pair = pairs[o.repeat] if o.repeat < len(pairs) else sole
        if pair is not None:
            o.prefill_worker, o.decode_worker = pair
            served[(o.id, o.repeat)] = o.prefill_worker
    explain_routing_misses(result, golden, topology, served, lambda o: o.prefill_worker)
    explained = prefill_half_hits(result, golden)
    routing = routing_summary(result.outcomes, topology, attributed=len(served))
    routing["prompt_only_hits"] = explained
    routing["routing_misses"] -= explained  # notes too, but the prefill half's, not the routing's
    routing["failing_pairs"] = failing_pairs(result.outcomes)
    result.routing = routing


def prefill_half_hits(result: ReplayResult, golden: Golden) -> int:
    """Judge every follow-up by what a prefill worker can hold: its parent's prompt, not its
    parent's output (module docstring). Returns how many shortfalls that explained."""
    expectation = expectation_of(result)
    index = {r.id: i for i, r in enumerate(golden.requests)}
    explained = 0
    for o in result.outcomes:
        i = index.get(o.id)
        if i is None or golden.requests[i].parent < 0 or o.expected_min_cached is None:
            continue
        parent = golden.requests[i].parent
        history = len(golden.input_ids(parent))
        short = _shortfall(o)
        o.expected_min_cached = min(o.expected_min_cached, expectation.minimum(history, 0))
        if not short:
            continue
        if expectation.problem(turn=1, history=history, output=0, cached=o.cached_tokens,
                               prompt=len(golden.input_ids(i))) is None:
            output = len(golden.requests[parent].output_ids)
            o.routing_note = (f"cached {o.cached_tokens}: the prefill worker held its parent's "
                              f"prompt ({history} tokens), never its {output} output tokens "
                              f"(decoded on the decode worker; not a cache bug; was: "
                              f"{o.cache_problem})")
            o.cache_problem = None
            explained += 1
    return explained


def expectation_of(result: ReplayResult) -> CacheExpectation:
    """The replay's cache expectation, back from its text (`str(CacheExpectation)`, e.g.
    `attention(page=128, pool pressure)` or `mamba:256`)."""
    text = result.expectation
    page = re.search(r"page=(\d+)", text)
    kind = text.split("(")[0].split(":")[0]
    interval = int(text.split(":")[1]) if kind == "mamba" else 1
    return CacheExpectation(kind, page_size=int(page.group(1)) if page else 1,
                            interval=interval, pressure="pool pressure" in text)


def explain_routing_misses(result: ReplayResult, golden: Golden, topology: Topology,
                           served: dict[tuple[str, int], int],
                           reuser: Callable[[RequestOutcome], int | None]) -> None:
    """A shortfall on another worker than the parent's (the one that could reuse its prefix:
    `reuser`), with no shared storage tier, becomes a routing note instead of a cache problem."""
    index = {r.id: i for i, r in enumerate(golden.requests)}
    for o in result.outcomes:
        parent = golden.requests[index[o.id]].parent if o.id in index else -1
        worker = reuser(o)
        if parent < 0 or worker is None:
            continue
        parent_worker = served.get((golden.requests[parent].id, o.repeat))
        if parent_worker is None or parent_worker == worker:
            continue
        if _shortfall(o) and not topology.profile.shared_storage:
            o.routing_note = (f"served by {_label(topology, worker)}, its parent by "
                              f"{_label(topology, parent_worker)}: the prefix was on another "
                              f"worker (a miss the routing caused, not a cache bug; was: "
                              f"{o.cache_problem})")
            o.cache_problem = None


def _label(topology: Topology, index: int) -> str:
    return next((w.label for w in topology.workers if w.index == index), f"worker {index}")


def failing_pairs(outcomes: list[RequestOutcome]) -> list[dict[str, Any]]:
    """PD: failures per (prefill worker, decode worker) pair, most first."""
    counts = Counter((o.prefill_worker, o.decode_worker) for o in outcomes
                     if not o.passed and o.prefill_worker is not None)
    return [{"prefill_worker": p, "decode_worker": d, "failed": n}
            for (p, d), n in counts.most_common()]


def _shortfall(o: RequestOutcome) -> bool:
    return (o.cache_problem is not None and o.expected_min_cached is not None
            and o.cached_tokens < o.expected_min_cached)


def routing_summary(outcomes: list[RequestOutcome], topology: Topology,
                    attributed: int) -> dict[str, Any]:
    """The report's `routing` object (docs/report.md)."""
    per_worker = []
    for w in topology.workers:
        mine = [o for o in outcomes if w.index in (o.worker, o.prefill_worker, o.decode_worker)]
        # a decode worker reuses nothing: its requests' hits are their prefill worker's
        reused = [] if w.role == DECODE else mine
        expecting = [o for o in reused if o.expected_min_cached]
        per_worker.append({
            "index": w.index, "role": w.role, "url": w.url, "fault": w.fault,
            "requests": len(mine),
            "failed": sum(1 for o in mine if not o.passed),
            "cached_tokens": sum(o.cached_tokens for o in reused),
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
