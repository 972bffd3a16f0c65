"""Shards come back together: the reports of `--shard i/n` runs merged into one report.

Each shard replays whole groups of the same golden on its own runner, so the merged document is
the union of their requests with the summary recomputed over all of them; its verdict is the
worst of the shards' (error > fail > pass). Merging refuses reports of different goldens,
policies or repeat counts (their union would mean nothing), and a request that two shards both
report (the same shard given twice).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from replay.utils.errors import UsageError
from replay.report.document import SCHEMA
from replay.golden.tree import parse_request_id

VERDICT_RANK = {"pass": 0, "fail": 1, "error": 2}


def worst_verdict(verdicts: Sequence[str]) -> str:
    return max(verdicts, key=lambda v: VERDICT_RANK.get(v, 2), default="error")


def _same(docs: Sequence[dict[str, Any]], key: str) -> Any:
    values = {str(d.get(key)) for d in docs}
    if len(values) > 1:
        raise UsageError(f"cannot merge reports with different {key}: {', '.join(sorted(values))}")
    return docs[0].get(key)


def _order(request: dict[str, Any]) -> tuple[Any, ...]:
    parsed = parse_request_id(str(request.get("id"))) or (0, 0, 0)
    group, branch, turn = parsed
    return (request.get("repeat", 0), turn, group, branch, str(request.get("id")))


def merge_reports(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One report document for several shard reports of the same golden."""
    if not docs:
        raise UsageError("give at least one report to merge")
    if any("matrix" in d for d in docs):
        raise UsageError("matrix reports cannot be merged with --merge (merge each profile's)")
    golden = _same(docs, "golden")
    policy = _same(docs, "policy")
    errors = [str(d.get("error")) for d in docs if d.get("verdict") == "error"]
    requests = [r for d in docs for r in d.get("requests") or []]
    keys = Counter((r.get("id"), r.get("repeat")) for r in requests)
    twice = sorted(str(k[0]) for k, n in keys.items() if n > 1)
    if twice:
        raise UsageError(f"request {twice[0]} is in more than one report (a shard given twice?)")
    requests.sort(key=_order)
    summaries = [d["summary"] for d in docs if isinstance(d.get("summary"), dict)]
    merged: dict[str, Any] = {
        "schema": SCHEMA,
        "verdict": worst_verdict([d.get("verdict", "error") for d in docs]),
        "error": "; ".join(errors) if errors else None,
        "golden": golden,
        "server": ", ".join(dict.fromkeys(str(d.get("server")) for d in docs)),
        "policy": policy,
        "expect_cache": ", ".join(dict.fromkeys(str(d.get("expect_cache")) for d in docs
                                                if d.get("expect_cache") is not None)) or None,
        "require_tier": docs[0].get("require_tier"),
        "tier_problem": _tier_problem(docs, summaries),
        "no_cache_hits": _no_cache_hits(docs),
        "hit_problem": _hit_problem(docs),
        "summary": _summary(summaries, requests) if summaries else None,
        "golden_meta": docs[0].get("golden_meta"),
        "server_meta": docs[0].get("server_meta"),
        "merged_from": [{"server": d.get("server"), "verdict": d.get("verdict"),
                         "shard": (d.get("golden_meta") or {}).get("shard")} for d in docs],
        "requests": requests,
    }
    if (merged["tier_problem"] or merged["hit_problem"]) and merged["verdict"] == "pass":
        merged["verdict"] = "fail"
    return merged


def _no_cache_hits(docs: Sequence[dict[str, Any]]) -> bool:
    """No shard was served from the cache at all."""
    return bool(docs) and all(d.get("no_cache_hits") for d in docs)


def _hit_problem(docs: Sequence[dict[str, Any]]) -> str | None:
    """A shard's zero-hit failure holds for the whole golden only when no shard hit the cache."""
    if not _no_cache_hits(docs) or not any(d.get("hit_problem") for d in docs):
        return None
    return ("no request was served from the cache in any shard, though the cache expectation "
            "asks for hits")


def _tier_problem(docs: Sequence[dict[str, Any]], summaries: list[dict[str, Any]]) -> str | None:
    """--require-tier holds for the whole golden when any shard saw the tier."""
    tier = docs[0].get("require_tier")
    if not tier:
        return None
    seen = sum(int((s.get("cached_tokens_by_tier") or {}).get(tier, 0)) for s in summaries)
    return None if seen else f"no cache hits came from the {tier} tier in any shard"


def _summary(summaries: list[dict[str, Any]], requests: list[dict[str, Any]]) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(int(s.get(key) or 0) for s in summaries)

    hits: Counter[str] = Counter()
    tiers: Counter[str] = Counter()
    for s in summaries:
        hits.update({str(k): int(v) for k, v in (s.get("cache_hit_lengths") or {}).items()})
        tiers.update({str(k): int(v) for k, v in (s.get("cached_tokens_by_tier") or {}).items()})
    ulps = [s.get("max_ulp", 0) for s in summaries]
    failed = sorted({int(i) for s in summaries for i in s.get("failed_repeat_indices") or []})
    weighted = [(float(s["mean_kl"]), int(s.get("tokens_compared") or 0)) for s in summaries
                if isinstance(s.get("mean_kl"), (int, float))]
    weight = sum(w for _, w in weighted)
    return {
        "requests": len({r.get("id") for r in requests}),
        "repeats": max(int(s.get("repeats") or 1) for s in summaries),
        "repeats_failed": len(failed),
        "failed_repeat_indices": failed,
        "tokens_compared": total("tokens_compared"),
        "requests_diverged": total("requests_diverged"),
        "requests_failed": total("requests_failed"),
        "cache_misses": total("cache_misses"),
        "mean_kl": sum(k * w for k, w in weighted) / weight if weight else 0.0,
        "max_ulp": "inf" if "inf" in ulps else max(int(u) for u in ulps),
        "cache_hit_lengths": dict(sorted(hits.items(), key=lambda kv: int(kv[0]))),
        "cached_tokens_by_tier": dict(sorted(tiers.items())),
    }
