"""The replay report: one JSON document (schema in docs/report.md) and a JUnit XML view.

`ReplayResult` is what the replayer produces; `report_dict` is its stable, documented JSON form.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import numpy as np

from replay.bits import ULP_INFINITE, hex_bits
from replay.diff import IDENTICAL, RequestDiff
from replay.tree import parse_request_id

SCHEMA = "golden-replay/report/1"
CACHE_MISS = "cache_miss"
ERROR = "error"
DETAIL_POSITIONS = 4096  # per-position arrays kept for a non-identical request


@dataclass
class RequestOutcome:
    id: str
    repeat: int
    diff: RequestDiff
    cached_tokens: int
    cached_details: dict[str, int]
    expected_min_cached: int | None
    cache_problem: str | None
    top: dict[str, Any] | None = None  # top-k of both sides at the first divergence
    num_retractions: int = 0  # times the server retracted this request (meta_info)
    retraction_lag: int = 0  # checkpoint lag allowed because its parent was retracted

    @property
    def status(self) -> str:
        if self.diff.status == IDENTICAL and self.cache_problem:
            return CACHE_MISS
        return self.diff.status

    @property
    def passed(self) -> bool:
        return self.diff.passed and self.cache_problem is None


@dataclass
class ReplayResult:
    golden: str
    server: str
    policy: str
    repeats: int
    expectation: str
    outcomes: list[RequestOutcome] = field(default_factory=list)
    hit_lengths: dict[str, int] = field(default_factory=dict)
    tiers: dict[str, int] = field(default_factory=dict)
    require_tier: str | None = None
    golden_meta: dict[str, Any] = field(default_factory=dict)
    server_meta: dict[str, Any] = field(default_factory=dict)
    storage_cleared: int = 0  # repeats that started by emptying an attached L3 storage tier

    @property
    def storage_hits_after_clear(self) -> list[dict[str, Any]]:
        """Turn-0 requests served from L3 storage in a repeat that began by clearing it: the
        clear did not empty the tier, so the repeat did not start cold."""
        if not self.storage_cleared:
            return []
        return [{"id": o.id, "repeat": o.repeat, "storage": o.cached_details.get("storage", 0)}
                for o in self.outcomes
                if o.cached_details.get("storage", 0) > 0
                and (parse_request_id(o.id) or (0, 0, 1))[2] == 0]

    @property
    def warnings(self) -> list[str]:
        """Things a reader must know that do not change the verdict by themselves."""
        stale = self.storage_hits_after_clear
        if not stale:
            return []
        return [f"{len(stale)} turn-0 request(s) were served from L3 storage in a repeat that "
                "began by clearing it: the clear did not empty the tier, so the repeat did not "
                "start cold"]

    @property
    def tier_problem(self) -> str | None:
        if self.require_tier and self.tiers.get(self.require_tier, 0) == 0:
            seen = ", ".join(f"{k}={v}" for k, v in sorted(self.tiers.items())) or "none"
            return f"no cache hits came from the {self.require_tier} tier (tokens by tier: {seen})"
        return None

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes) and self.tier_problem is None

    @property
    def failures(self) -> list[RequestOutcome]:
        return [o for o in self.outcomes if not o.passed]


def _num(x: float) -> float | str | None:
    """JSON has no NaN/inf: write them as strings rather than produce invalid JSON."""
    if x is None:
        return None
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return x


def _ulp(u: int) -> int | str:
    return "inf" if u >= ULP_INFINITE else int(u)


def outcome_dict(o: RequestOutcome) -> dict[str, Any]:
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
    }
    if d.status != IDENTICAL:
        n = min(DETAIL_POSITIONS, len(d.abs_delta))
        out["detail"] = {
            "abs_delta": [_num(float(x)) for x in d.abs_delta[:n]],
            "ulp": [_ulp(int(x)) for x in d.ulp[:n]],
            "top_k": _clean_top(o.top),
        }
    return out


def _clean_top(top: dict[str, Any] | None) -> dict[str, Any] | None:
    if top is None:
        return None
    return {
        "position": top["position"],
        "golden": [[t, _num(v)] for t, v in top["golden"]],
        "replay": [[t, _num(v)] for t, v in top["replay"]],
    }


def report_dict(result: ReplayResult | None, *, golden: str, server: str, policy: str,
                error: str | None = None) -> dict[str, Any]:
    if result is None:
        return {"schema": SCHEMA, "verdict": "error", "error": error, "golden": golden,
                "server": server, "policy": policy, "summary": None, "requests": []}
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
        "expect_cache": result.expectation,
        "require_tier": result.require_tier,
        "tier_problem": result.tier_problem,
        "storage_cleared": result.storage_cleared,
        "storage_hits_after_clear": result.storage_hits_after_clear,
        "warnings": result.warnings,
        "summary": {
            "requests": len({o.id for o in outcomes}),
            "repeats": result.repeats,
            "repeats_failed": len(failed_repeats),
            "failed_repeat_indices": failed_repeats,
            "tokens_compared": int(sum(o.diff.compared for o in outcomes)),
            "requests_diverged": sum(1 for o in outcomes if o.diff.status != IDENTICAL),
            "requests_failed": sum(1 for o in outcomes if not o.passed),
            "cache_misses": sum(1 for o in outcomes if o.cache_problem),
            "retracted_requests": sum(1 for o in outcomes if o.num_retractions),
            "mean_kl": _num(float(np.mean(finite_kl)) if finite_kl else 0.0),
            "max_ulp": _ulp(max((o.diff.max_ulp for o in outcomes), default=0)),
            "cache_hit_lengths": result.hit_lengths,
            "cached_tokens_by_tier": result.tiers,
        },
        "golden_meta": result.golden_meta,
        "server_meta": result.server_meta,
        "requests": [outcome_dict(o) for o in outcomes],
    }


def write_json(report: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")


def junit_xml(report: dict[str, Any], suite_name: str = "golden-replay") -> str:
    """One testcase per request id (and repeat, when there are several)."""
    requests = report.get("requests") or []
    suite = ET.Element("testsuite", name=suite_name, tests=str(max(1, len(requests))))
    failures = errors = 0
    if report["verdict"] == "error":
        case = ET.SubElement(suite, "testcase", classname=suite_name, name="replay")
        ET.SubElement(case, "error", message=str(report.get("error")))
        errors += 1
    repeats = (report.get("summary") or {}).get("repeats", 1)
    for r in requests:
        name = r["id"] if repeats == 1 else f"{r['id']}#{r['repeat']}"
        case = ET.SubElement(suite, "testcase", classname=suite_name, name=name)
        if not r["passed"]:
            failures += 1
            ET.SubElement(case, "failure", message=failure_line(r), type=r["status"])
    if report.get("tier_problem"):
        case = ET.SubElement(suite, "testcase", classname=suite_name, name="cache-tier")
        ET.SubElement(case, "failure", message=report["tier_problem"], type="cache_tier")
        failures += 1
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def failure_line(r: dict[str, Any]) -> str:
    f = r.get("first_divergence")
    if f:
        line = (f"{r['status']}: first difference at output position {f['position']} "
                f"({f['kind']}): golden token {f['golden_token']} logprob {f['golden_logprob']} "
                f"({f['golden_bits']}), replay token {f['replay_token']} logprob "
                f"{f['replay_logprob']} ({f['replay_bits']}), {f['ulp']} ulp")
        t = r.get("token_divergence_position")
        if t is not None and t != f["position"]:
            line += f"; tokens diverge at position {t}"
        return line
    return r.get("cache_problem") or r["status"]


def verdict_line(report: dict[str, Any]) -> str:
    if report["verdict"] == "error":
        return f"ERROR: {report['error']}"
    s = report["summary"]
    hits = ", ".join(f"{k}x{v}" for k, v in s["cache_hit_lengths"].items())
    tiers = ", ".join(f"{k}={v}" for k, v in sorted(s["cached_tokens_by_tier"].items())) or "-"
    head = "PASS" if report["verdict"] == "pass" else "FAIL"
    line = (f"{head}: {s['requests']} requests x {s['repeats']} repeat(s), "
            f"{s['tokens_compared']} tokens compared, {s['requests_failed']} failed "
            f"({s['requests_diverged']} diverged, {s['cache_misses']} cache misses), "
            f"policy {report['policy']}, max ulp {s['max_ulp']}; "
            f"cache {report['expect_cache']}: hit lengths [{hits}], cached tokens by tier [{tiers}]")
    if report.get("tier_problem"):
        line += f"; {report['tier_problem']}"
    for warning in report.get("warnings") or []:
        line += f"; warning: {warning}"
    return line


def first_failure_lines(report: dict[str, Any], limit: int = 30) -> list[str]:
    failing = [r for r in report.get("requests", []) if not r["passed"]]
    lines = [f"{r['id']} (repeat {r['repeat']}): {failure_line(r)}" for r in failing[:limit]]
    if len(failing) > limit:
        lines.append(f"... and {len(failing) - limit} more (see --report)")
    return lines
