"""The replay report: the one JSON document (schema in docs/report.md), built in one place.

`ReplayResult` (replay/report/results.py) is what the replayer produces; `report_dict` is its stable,
documented JSON form, which every view reads (replay/report/views.py, replay/report/html/).
`build_report` is the one builder: from the request entries (`outcome_dict`) and what the run
found beside them (`RunFacts`) it writes the document, its summary and its verdict. A replay
hands it its outcomes (`report_dict`); `golden report --merge` hands it the union of the shards'
requests (replay/report/merge.py), so a merged document is the same contract by construction.
Adding a field: a request's in `outcome_dict`, a summary's in `summary_of`, a top-level one as a
field of `RunFacts` (or of `RunSetup`, for what was asked).
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from replay.utils.bits import ULP_INFINITE, hex_bits
from replay.judge.diff import IDENTICAL, PROMPT_LOGPROB_DRIFT
from replay.report.control import control_outcome_fields, tier_only
from replay.report.results import CACHE_MISS, SERVER_ID_MISMATCH, ReplayResult, RequestOutcome

SCHEMA = "golden-replay/report/1"
VERDICT_RANK = {"pass": 0, "fail": 1, "error": 2}
DETAIL_POSITIONS = 4096  # per-position arrays kept for a non-identical request
# the statuses of a request whose outputs were identical bit for bit (not "diverged")
OUTPUTS_IDENTICAL = (IDENTICAL, PROMPT_LOGPROB_DRIFT, CACHE_MISS, SERVER_ID_MISMATCH)
MISREPORTED_SHOWN = 8  # prompt ids reported other than sent, shown per request


def _num(x: float) -> float | str | None:
    """JSON has no NaN/inf: write them as strings rather than produce invalid JSON."""
    if x is None:
        return None
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return x


def _ulp(u: int) -> int | str:
    return "inf" if u >= ULP_INFINITE else int(u)


def outcome_dict(o: RequestOutcome, with_control: bool = False) -> dict[str, Any]:
    d = o.diff
    first = None
    if d.first is not None:
        f = d.first
        first = {
            "position": f.position, "kind": f.kind,
            "golden_token": f.golden_token, "replay_token": f.replay_token,
            "golden_logprob": _num(f.golden_logprob), "replay_logprob": _num(f.replay_logprob),
            "golden_bits": hex_bits(f.golden_logprob), "replay_bits": hex_bits(f.replay_logprob),
            "ulp": _ulp(f.ulp),
        }
    out: dict[str, Any] = {
        "id": o.id, "repeat": o.repeat, "status": o.status, "passed": o.passed,
        "cached_tokens": o.cached_tokens, "cached_tokens_details": o.cached_details,
        "expected_min_cached": o.expected_min_cached, "cache_problem": o.cache_problem,
        "num_retractions": o.num_retractions, "retraction_lag": o.retraction_lag,
        "tokens_compared": d.compared, "max_ulp": _ulp(d.max_ulp), "mean_kl": _num(d.mean_kl),
        "first_divergence": first,
        "token_divergence_position": d.token_position,
        "prompt_logprobs": _prompt(o),
        "answer_sha256": o.answer_digest or None,
    }
    if o.misreported_ids:  # the server's bug, not a verdict (docs/findings/sglang-ids.md)
        out["misreported_prompt_ids"] = {
            "count": len(o.misreported_ids),
            "first": [{"position": m.position, "sent": m.sent, "reported": m.reported}
                      for m in o.misreported_ids[:MISREPORTED_SHOWN]]}
    if with_control:  # a report with a control replay (docs/control.md)
        out.update(control_outcome_fields(o))
    if o.worker is not None:  # replayed through a router (docs/topologies.md)
        out["worker"] = o.worker
        out["routing_note"] = o.routing_note
    if o.prefill_worker is not None:  # through a PD router: both halves (docs/topologies.md)
        out["prefill_worker"], out["decode_worker"] = o.prefill_worker, o.decode_worker
        out["routing_note"] = o.routing_note
    if d.status != IDENTICAL:
        n = min(DETAIL_POSITIONS, len(d.abs_delta))
        out["detail"] = {
            "abs_delta": [_num(float(x)) for x in d.abs_delta[:n]],
            "ulp": [_ulp(int(x)) for x in d.ulp[:n]],
            "top_k": _clean_top(o.top),
        }
    return out


def _prompt(o: RequestOutcome) -> dict[str, Any] | None:
    p = o.prompt
    if p is None:
        return None
    return {
        "compared": p.compared, "identical": p.identical, "passed": p.passed,
        "first_position": p.first_position,
        "golden_logprob": None if p.identical else _num(p.golden_logprob),
        "replay_logprob": None if p.identical else _num(p.replay_logprob),
        "golden_bits": None if p.identical else hex_bits(p.golden_logprob),
        "replay_bits": None if p.identical else hex_bits(p.replay_logprob),
        "ulp": _ulp(p.ulp), "max_ulp": _ulp(p.max_ulp), "mean_kl": _num(p.mean_kl),
    }


def _clean_top(top: dict[str, Any] | None) -> dict[str, Any] | None:
    if top is None:
        return None
    return {
        "position": top["position"],
        "golden": [[t, _num(v)] for t, v in top["golden"]],
        "replay": [[t, _num(v)] for t, v in top["replay"]],
    }


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
    The result's outcomes move into the document: each becomes its entry and leaves
    `result.outcomes`, so a replay of 100k requests never holds both at once."""
    if result is None:
        return build_report([], None, golden=golden, server=server, policy=policy, error=error,
                            setup=setup)
    facts = facts_of(result)
    return build_report(_entries(result), facts, golden=golden, server=server, policy=policy,
                        error=error, setup=setup)


def _entries(result: ReplayResult) -> list[dict[str, Any]]:
    """The request entries, in order, each outcome dropped once its entry is made."""
    with_control = result.control is not None
    outcomes, result.outcomes = result.outcomes, []
    outcomes.reverse()
    entries = []
    while outcomes:
        entries.append(outcome_dict(outcomes.pop(), with_control))
    return entries


def build_report(requests: list[dict[str, Any]], facts: RunFacts | None, *, golden: str,
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


def summary_of(requests: Sequence[dict[str, Any]], facts: RunFacts) -> dict[str, Any]:
    """The summary, counted over the request entries."""
    failed_repeats = sorted({r["repeat"] for r in requests if not r["passed"]})
    kls = [float(r["mean_kl"]) for r in requests if _finite(r.get("mean_kl"))]
    prompts = [r["prompt_logprobs"] for r in requests if isinstance(r.get("prompt_logprobs"), dict)]
    return {
        "requests": len({r["id"] for r in requests}),
        "repeats": facts.repeats,
        "repeats_failed": len(failed_repeats),
        "failed_repeat_indices": failed_repeats,
        "tokens_compared": sum(_count(r.get("tokens_compared")) for r in requests),
        "prompt_logprobs_compared": sum(_count(p.get("compared")) for p in prompts),
        "prompt_logprob_drifts": sum(1 for p in prompts if not p.get("identical")),
        "requests_diverged": sum(1 for r in requests
                                 if r.get("status") not in OUTPUTS_IDENTICAL),
        "requests_failed": sum(1 for r in requests if not r["passed"]),
        "cache_misses": sum(1 for r in requests if r.get("cache_problem")),
        "retracted_requests": sum(1 for r in requests if _count(r.get("num_retractions"))),
        "server_id_mismatches": sum(1 for r in requests if r.get("misreported_prompt_ids")),
        "mean_kl": _num(float(np.mean(kls)) if kls else 0.0),
        "max_ulp": _ulp(max((_ulp_value(r.get("max_ulp")) for r in requests), default=0)),
        "cache_hit_lengths": facts.hit_lengths,
        "cached_tokens_by_tier": facts.tiers,
        **({"failed_on_tier_only": sum(1 for r in requests if tier_only(r))}
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
