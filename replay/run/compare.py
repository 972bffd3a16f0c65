"""`golden diff`: two goldens of the same scenario compared by the replay rules.

A request is compared only when both goldens sent it the same input; a request whose input
differs (because an ancestor's output diverged) is not comparable and listed as such: its
ancestor's divergence already fails the comparison.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replay.judge.diff import Policy, diff_outputs
from replay.utils.errors import UsageError
from replay.golden.model import Golden
from replay.report.document import RunSetup, report_dict
from replay.report.results import ReplayResult, RequestOutcome


def compare_goldens(a: Golden, b: Golden, name_a: str, name_b: str, policy: Policy) -> dict[str, Any]:
    ids_a = [r.id for r in a.requests]
    ids_b = [r.id for r in b.requests]
    if ids_a != ids_b:
        raise UsageError(f"{name_a} and {name_b} hold different request trees: not comparable")
    if a.top_k != b.top_k:
        raise UsageError(f"{name_a} has top-k {a.top_k}, {name_b} has {b.top_k}: not comparable")
    result = ReplayResult(golden=name_a, server=name_b, policy=str(policy), repeats=1,
                          expectation="none", golden_meta=a.meta, server_meta=b.meta,
                          replays_a_server=False)
    skipped: list[str] = []
    for i, (ra, rb) in enumerate(zip(a.requests, b.requests)):
        if not np.array_equal(a.input_ids(i), b.input_ids(i)):
            skipped.append(ra.id)
            continue
        result.outcomes.append(RequestOutcome(
            id=ra.id, repeat=0, diff=diff_outputs(ra, rb, policy), cached_tokens=rb.cached_tokens,
            cached_details=rb.cached_details, expected_min_cached=None, cache_problem=None,
        ))
    doc = report_dict(result, golden=name_a, server=name_b, policy=str(policy),
                      setup=RunSetup(golden_sha256=a.checksum, expect_cache="none",
                                     target=name_b))
    doc["summary"]["requests_not_comparable"] = skipped
    if skipped and doc["verdict"] == "pass":  # inputs differ with no divergence seen: new tree
        raise UsageError(f"{name_a} and {name_b} send different inputs to {skipped[0]}: not comparable")
    return doc
