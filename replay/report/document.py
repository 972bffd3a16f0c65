"""The replay report: the one JSON document (schema in docs/report.md).

`ReplayResult` (replay/report/results.py) is what the replayer produces; `report_dict` is its stable,
documented JSON form, which every view reads (replay/report/views.py, replay/report/html/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay.utils.bits import ULP_INFINITE, hex_bits
from replay.judge.diff import IDENTICAL
from replay.report.control import control_outcome_fields
from replay.report.results import ReplayResult, RequestOutcome

SCHEMA = "golden-replay/report/1"
DETAIL_POSITIONS = 4096  # per-position arrays kept for a non-identical request
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


@dataclass(frozen=True)
class RunSetup:
    """What a replay was asked to do, known before it starts: written into every report, an
    error report too, so `golden report --merge` can tell whether shard reports belong together
    (the same golden by content, the same shard count, options and server)."""

    golden_sha256: str | None = None  # the golden's content checksum (Golden.checksum)
    shard: str | None = None  # "i/n", None for the whole golden
    repeat: int = 1
    expect_cache: str = "auto"  # as asked (the report's `expect_cache` is what it resolved to)
    require_tier: str | None = None
    target: str | None = None  # "launch:PROFILE" or the redacted URL, as given

    def as_dict(self) -> dict[str, Any]:
        return {"golden_sha256": self.golden_sha256, "shard": self.shard, "repeat": self.repeat,
                "expect_cache_asked": self.expect_cache, "require_tier": self.require_tier,
                "server_target": self.target}


def report_dict(result: ReplayResult | None, *, golden: str, server: str, policy: str,
                error: str | None = None, setup: RunSetup | None = None) -> dict[str, Any]:
    asked = (setup or RunSetup()).as_dict()
    if result is None:
        return {"schema": SCHEMA, "verdict": "error", "error": error, "golden": golden,
                "server": server, "policy": policy, **asked, "summary": None, "requests": []}
    outcomes = result.outcomes
    failed_repeats = sorted({o.repeat for o in outcomes if not o.passed})
    finite_kl = [o.diff.mean_kl for o in outcomes if np.isfinite(o.diff.mean_kl)]
    verdict = "error" if error else ("pass" if result.passed else "fail")
    return {
        "schema": SCHEMA,
        "verdict": verdict,
        "error": error,
        "golden": golden,
        "server": server,
        "policy": policy,
        **asked,
        "expect_cache": result.expectation,
        "require_tier": result.require_tier,
        "tier_problem": result.tier_problem,
        "no_cache_hits": result.no_cache_hits,
        "hit_problem": result.hit_problem,
        "storage_cleared": result.storage_cleared,
        "storage_hits_after_clear": result.storage_hits_after_clear,
        "warnings": result.warnings,
        "summary": {
            "requests": len({o.id for o in outcomes}),
            "repeats": result.repeats,
            "repeats_failed": len(failed_repeats),
            "failed_repeat_indices": failed_repeats,
            "tokens_compared": int(sum(o.diff.compared for o in outcomes)),
            "prompt_logprobs_compared": int(sum(o.prompt.compared for o in outcomes
                                                if o.prompt is not None)),
            "prompt_logprob_drifts": sum(1 for o in outcomes
                                         if o.prompt is not None and not o.prompt.identical),
            "requests_diverged": sum(1 for o in outcomes if o.diff.status != IDENTICAL),
            "requests_failed": sum(1 for o in outcomes if not o.passed),
            "cache_misses": sum(1 for o in outcomes if o.cache_problem),
            "retracted_requests": sum(1 for o in outcomes if o.num_retractions),
            "server_id_mismatches": sum(1 for o in outcomes if o.misreported_ids),
            "mean_kl": _num(float(np.mean(finite_kl)) if finite_kl else 0.0),
            "max_ulp": _ulp(max((o.diff.max_ulp for o in outcomes), default=0)),
            "cache_hit_lengths": result.hit_lengths,
            "cached_tokens_by_tier": result.tiers,
            **({"failed_on_tier_only": result.control["failed_on_tier_only"]}
               if result.control is not None else {}),
        },
        "numerics": result.numerics,
        **({"control": result.control} if result.control is not None else {}),
        **({"routing": result.routing} if result.routing is not None else {}),
        "golden_meta": result.golden_meta,
        "server_meta": result.server_meta,
        "requests": [outcome_dict(o, result.control is not None) for o in outcomes],
    }
