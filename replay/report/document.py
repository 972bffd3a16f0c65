"""The replay report: the one JSON document (schema in docs/report.md), built in one place.

`ReplayResult` (replay/report/results.py) is what the replayer produces; `report_dict` is its stable,
documented JSON form, which every view reads (replay/report/views.py, replay/report/html/).
`build_report` is the one builder: from the request entries (`entries.outcome_dict`) and what
the run found beside them (`RunFacts`) it writes the document, its summary and its verdict. A replay
hands it its outcomes (`report_dict`); `golden report --merge` hands it the union of the shards'
requests (replay/report/merge.py), so a merged document is the same contract by construction.
Adding a field: a request's in `entries.outcome_dict`, a summary's in `summary_of`, a top-level
one as a field of `RunFacts` (or of `RunSetup`, for what was asked).
"""

from __future__ import annotations

import math
import uuid
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from replay.utils.bits import ULP_INFINITE
from replay.judge.diff import IDENTICAL, PROMPT_LOGPROB_DRIFT
from replay.report.control import tier_only
from replay.report.entries import RequestEntries, json_number, json_ulp
from replay.report.results import CACHE_MISS, SERVER_ID_MISMATCH, ReplayResult

SCHEMA = "golden-replay/report/1"
VERDICT_RANK = {"pass": 0, "fail": 1, "error": 2}
# the statuses of a request whose outputs were identical bit for bit (not "diverged")
OUTPUTS_IDENTICAL = (IDENTICAL, PROMPT_LOGPROB_DRIFT, CACHE_MISS, SERVER_ID_MISMATCH)


def new_run_id() -> str:
    """A run's identity, made when the run is made: two runs are never one, however alike."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class RunSetup:
    """What a replay was asked to do, known before it starts: written into every report, an
    error report too, so `golden report --merge` can tell whether shard reports belong together
    (the same golden by content, the same shard count, options and server), and the results
    history can tell runs apart (`run_id`) and say how the client drove the server."""

    golden_sha256: str | None = None  # the golden's content checksum (Golden.checksum)
    shard: str | None = None  # "i/n", None for the whole golden
    repeat: int = 1
    expect_cache: str = "auto"  # as asked (the report's `expect_cache` is what it resolved to)
    require_tier: str | None = None
    target: str | None = None  # "launch:PROFILE" or the redacted URL, as given
    concurrency: int | None = None  # requests in flight at once (the client's setting)
    schedule: str | None = None  # the request order (lockstep | interleave | dag)
    run_id: str = field(default_factory=new_run_id)  # one per RunSetup made: one per run

    def as_dict(self) -> dict[str, Any]:
        client = {"concurrency": self.concurrency, "schedule": self.schedule}
        return {"run_id": self.run_id, "golden_sha256": self.golden_sha256, "shard": self.shard,
                "repeat": self.repeat, "expect_cache_asked": self.expect_cache,
                "require_tier": self.require_tier, "server_target": self.target,
                "client": client if any(v is not None for v in client.values()) else None}


@dataclass(frozen=True)
class RunFacts:
    """What a judged run found beside its requests, in the document's order; each field is a
    top-level key of the report (`OPTIONAL` ones only when set). `repeats`, `hit_lengths` and
    `tiers` go into the summary instead."""

    expect_cache: str | None = None  # the expectation as resolved
    require_tier: str | None = None
    tier_problem: str | None = None
    no_cache_hits: bool = False
    hit_problem: str | None = None
    storage_cleared: int = 0
    storage_hits_after_clear: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    numerics: dict[str, Any] | None = None
    control: dict[str, Any] | None = None  # with a control replay only (docs/control.md)
    routing: dict[str, Any] | None = None  # behind a router only (docs/topologies.md)
    golden_meta: dict[str, Any] = field(default_factory=dict)
    server_meta: dict[str, Any] | None = field(default_factory=dict)
    merged_from: list[dict[str, Any]] | None = None  # a `golden report --merge` document only
    repeats: int = 1
    hit_lengths: dict[str, int] = field(default_factory=dict)  # requests per cache-hit length
    tiers: dict[str, int] = field(default_factory=dict)  # cached tokens per tier

    OPTIONAL = ("control", "routing", "merged_from")
    IN_SUMMARY = ("repeats", "hit_lengths", "tiers")

    def as_dict(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in self.IN_SUMMARY or (f.name in self.OPTIONAL and value is None):
                continue
            out[f.name] = value
        return out


def facts_of(result: ReplayResult) -> RunFacts:
    return RunFacts(
        expect_cache=result.expectation, require_tier=result.require_tier,
        tier_problem=result.tier_problem, no_cache_hits=result.no_cache_hits,
        hit_problem=result.hit_problem, storage_cleared=result.storage_cleared,
        storage_hits_after_clear=result.storage_hits_after_clear, warnings=result.warnings,
        numerics=result.numerics, control=result.control, routing=result.routing,
        golden_meta=result.golden_meta,
        server_meta=result.server_meta, repeats=result.repeats, hit_lengths=result.hit_lengths,
        tiers=result.tiers)


def report_dict(result: ReplayResult | None, *, golden: str, server: str, policy: str,
                error: str | None = None, setup: RunSetup | None = None) -> dict[str, Any]:
    """The document of one replay (`result` None: it reached no verdict, `error` says why).
    The result's outcomes move into the document as its `RequestEntries` (each entry made when
    read) and leave `result.outcomes`: nothing is held twice."""
    if result is None:
        return build_report([], None, golden=golden, server=server, policy=policy, error=error,
                            setup=setup)
    facts = facts_of(result)
    entries = RequestEntries(result.outcomes, with_control=result.control is not None)
    result.outcomes = []
    return build_report(entries, facts, golden=golden, server=server, policy=policy,
                        error=error, setup=setup)


def build_report(requests: Sequence[dict[str, Any]], facts: RunFacts | None, *, golden: str,
                 server: str, policy: str, error: str | None = None,
                 setup: RunSetup | None = None, partial: bool = False) -> dict[str, Any]:
    """The report document: from the request entries (as `outcome_dict` writes them) and the
    run's facts (None: no run was judged, an `error` document with no requests). An `error`
    with facts keeps its requests and their summary (the tested replay finished, its control
    did not), unless they are `partial` (a merge missing an errored shard's: no summary)."""
    head = {"schema": SCHEMA, "verdict": "error", "error": error, "golden": golden,
            "server": server, "policy": policy, **(setup or RunSetup()).as_dict()}
    if facts is None:
        return {**head, "summary": None, "requests": []}
    head["verdict"] = verdict_of(requests, facts, error)
    body = facts.as_dict()
    tail = {k: body.pop(k) for k in ("numerics", "control", "routing", "golden_meta",
                                     "server_meta", "merged_from") if k in body}
    return {**head, **body, "summary": None if partial else summary_of(requests, facts), **tail,
            "requests": requests}


def verdict_of(requests: Sequence[dict[str, Any]], facts: RunFacts, error: str | None) -> str:
    """The verdict rule: an error is never a pass or a fail; a pass needs every request passed
    and no tier or hit problem."""
    if error:
        return "error"
    passed = all(r["passed"] is True for r in requests)
    return "pass" if passed and not facts.tier_problem and not facts.hit_problem else "fail"


def worst_verdict(verdicts: Sequence[str]) -> str:
    return max(verdicts, key=lambda v: VERDICT_RANK.get(v, 2), default="error")


def matrix_report(reports: dict[str, dict[str, Any]], *, golden: str, policy: str,
                  shard: str | None,
                  merged_from: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The matrix document (`golden matrix`, docs/ci.md): one report per profile, in the given
    order, under a verdict that is the worst of theirs."""
    verdicts = {name: doc["verdict"] for name, doc in reports.items()}
    checksum = next((d.get("golden_sha256") for d in reports.values() if d.get("golden_sha256")),
                    None)
    return {"schema": SCHEMA, "verdict": worst_verdict(list(verdicts.values())), "error": None,
            "golden": golden, "golden_sha256": checksum, "policy": policy, "shard": shard,
            **({"merged_from": merged_from} if merged_from is not None else {}),
            "matrix": {"profiles": list(reports), "verdicts": verdicts, "reports": reports}}


def summary_of(requests: Iterable[dict[str, Any]], facts: RunFacts) -> dict[str, Any]:
    """The summary, counted over the request entries in one pass (a replay's entries are made
    as they are read: replay/report/entries.py)."""
    ids: set[str] = set()
    failed_repeats: set[int] = set()
    kls = array("d")
    counts = Counter[str]()
    max_ulp = 0
    for r in requests:
        ids.add(r["id"])
        if not r["passed"]:
            failed_repeats.add(r["repeat"])
            counts["requests_failed"] += 1
        if _finite(r.get("mean_kl")):
            kls.append(float(r["mean_kl"]))
        p = r.get("prompt_logprobs")
        if isinstance(p, dict):
            counts["prompt_logprobs_compared"] += _count(p.get("compared"))
            counts["prompt_logprob_drifts"] += not p.get("identical")
        counts["tokens_compared"] += _count(r.get("tokens_compared"))
        counts["requests_diverged"] += r.get("status") not in OUTPUTS_IDENTICAL
        counts["cache_misses"] += bool(r.get("cache_problem"))
        counts["retracted_requests"] += bool(_count(r.get("num_retractions")))
        counts["server_id_mismatches"] += bool(r.get("misreported_prompt_ids"))
        counts["failed_on_tier_only"] += tier_only(r)
        max_ulp = max(max_ulp, _ulp_value(r.get("max_ulp")))
    return {
        "requests": len(ids),
        "repeats": facts.repeats,
        "repeats_failed": len(failed_repeats),
        "failed_repeat_indices": sorted(failed_repeats),
        **{key: counts[key] for key in ("tokens_compared", "prompt_logprobs_compared",
                                         "prompt_logprob_drifts", "requests_diverged",
                                         "requests_failed", "cache_misses",
                                         "retracted_requests", "server_id_mismatches")},
        "mean_kl": json_number(float(np.mean(kls)) if kls else 0.0),
        "max_ulp": json_ulp(max_ulp),
        "cache_hit_lengths": facts.hit_lengths,
        "cached_tokens_by_tier": facts.tiers,
        **({"failed_on_tier_only": counts["failed_on_tier_only"]}
           if facts.control is not None else {}),
    }


def hit_lengths_of(requests: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Requests per cache-hit length, as the replayer counts them."""
    hits = Counter(_count(r.get("cached_tokens")) for r in requests)
    return {str(k): v for k, v in sorted(hits.items())}


def tiers_of(requests: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Cached tokens per tier, over the requests' `cached_tokens_details`."""
    tiers: Counter[str] = Counter()
    for r in requests:
        details = r.get("cached_tokens_details")
        for tier, n in (details.items() if isinstance(details, dict) else ()):
            if _count(n) > 0:
                tiers[str(tier)] += n
    return dict(sorted(tiers.items()))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _ulp_value(value: Any) -> int:
    return ULP_INFINITE if value == "inf" else _count(value)
