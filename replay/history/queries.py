"""What a user asks of the history about one golden, as one JSON-ready document:

- `timeline`: every run, oldest first: when, verdict, server version, flags, failures;
- `versions`: per server version (in version order) its runs, verdict counts, fail rate (failing
  runs / judged runs) and flake rate (requests that both passed and failed on it / requests);
- `bisect`: the first server version with a failing run and the last all-passing one before it
  (versions ordered by their numbers: "0.5.9" < "0.5.23"), and whether every later version
  fails too (`consistent`) or the failure comes and goes;
- `requests`: per request, how often it failed, how often its outcome flipped from one run to
  the next, and whether it is flaky (passed and failed on the same server version and flags),
  most unstable first;
- `coverage`: the cache-hit lengths and the tiers the runs exercised, overall and per version.
Error runs appear in the timeline and the counts but judge no request (they compared nothing).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

from replay.history.store import GoldenSelector, HistoryStore
from replay.utils.errors import UsageError

SCHEMA = "golden-replay/history/1"


def version_key(version: str) -> tuple[Any, ...]:
    """Order server versions by their numbers ("0.5.9" before "0.5.23"); "unknown" last."""
    if version == "unknown":
        return (1,)
    parts = re.split(r"(\d+)", version)
    return (0, tuple(int(p) if i % 2 else p for i, p in enumerate(parts)))


def iso(when: datetime) -> str:
    return when.isoformat(timespec="seconds") + "Z"


def run_summary(run: dict[str, Any]) -> dict[str, Any]:
    """One run as `golden history` lists it."""
    return {
        "run": run["id"], "at": iso(run["run_at"]), "golden": run["golden_name"],
        "golden_key": run["golden_key"], "verdict": run["verdict"],
        "server": run["server"], "server_version": run["server_version"],
        "flags": run["flags_sha256"][:12], "numerics": run["numerics_sha256"][:12],
        "shard": run["shard"], "merged": bool(run["merged"]),
        "requests": run["requests"], "requests_failed": run["requests_failed"],
        "error": run["error"],
    }


def golden_history(store: HistoryStore, selector: GoldenSelector) -> dict[str, Any]:
    runs = store.golden_runs(selector)
    if not runs:
        raise UsageError(f"the history {store.where} has no run of {selector.text!r}")
    judged = [r for r in runs if r["verdict"] != "error"]
    outcomes = store.outcomes_of([r["id"] for r in judged])
    by_run = {r["id"]: r for r in runs}
    versions = _versions(runs, flaky_by_version(outcomes, by_run))
    return {
        "schema": SCHEMA,
        "golden": selector.text,
        "golden_keys": sorted({r["golden_key"] for r in runs}),
        "names": sorted({r["golden_name"] for r in runs}),
        "runs": len(runs),
        "verdicts": dict(Counter(r["verdict"] for r in runs)),
        "timeline": [run_summary(r) for r in runs],
        "versions": versions,
        "bisect": bisect(versions),
        "requests": request_stability(outcomes, by_run),
        "coverage": coverage(outcomes, by_run),
    }


def flaky_by_version(outcomes: list[dict[str, Any]],
                     by_run: dict[int, dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per server version: (requests that both passed and failed there, requests observed)."""
    seen: dict[str, dict[str, set[bool]]] = defaultdict(lambda: defaultdict(set))
    for o in outcomes:
        seen[by_run[o["run_id"]]["server_version"]][o["request_id"]].add(bool(o["passed"]))
    return {v: (sum(1 for s in reqs.values() if len(s) == 2), len(reqs)) for v, reqs in seen.items()}


def _versions(runs: list[dict[str, Any]],
              flaky: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[r["server_version"]].append(r)
    out = []
    for version in sorted(groups, key=version_key):
        rs = groups[version]
        counts = Counter(r["verdict"] for r in rs)
        judged = counts["pass"] + counts["fail"]
        out.append({
            "version": version, "runs": len(rs),
            "pass": counts["pass"], "fail": counts["fail"], "error": counts["error"],
            "fail_rate": round(counts["fail"] / judged, 4) if judged else None,
            "flaky_requests": flaky.get(version, (0, 0))[0],
            "flake_rate": (round(flaky[version][0] / flaky[version][1], 4)
                           if flaky.get(version, (0, 0))[1] else None),
            "first_at": iso(rs[0]["run_at"]), "last_at": iso(rs[-1]["run_at"]),
            "flags": sorted({r["flags_sha256"][:12] for r in rs}),
        })
    return out


def bisect(versions: list[dict[str, Any]]) -> dict[str, Any]:
    """The first failing server version and the last passing one before it."""
    judged = [v for v in versions if v["pass"] + v["fail"]]
    first_bad = next((i for i, v in enumerate(judged) if v["fail"]), None)
    if first_bad is None:
        return {"first_failing": None, "last_passing": judged[-1]["version"] if judged else None,
                "consistent": True, "note": "no version has a failing run"}
    before = [v for v in judged[:first_bad] if not v["fail"]]
    later = judged[first_bad:]
    consistent = all(v["fail"] for v in later)
    flaky_here = bool(judged[first_bad]["pass"])
    note = (f"first fails on {judged[first_bad]['version']}"
            + (f", after {before[-1]['version']} passed" if before else " (no earlier passing version)")
            + ("; it also passed there (flaky)" if flaky_here else "")
            + ("" if consistent else "; some later version passes again"))
    return {"first_failing": judged[first_bad]["version"],
            "last_passing": before[-1]["version"] if before else None,
            "consistent": consistent, "note": note}


def request_stability(outcomes: list[dict[str, Any]],
                      by_run: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per request id: observations, failures, flips between consecutive runs, flakiness."""
    seen: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for o in outcomes:  # in run (time) order, then report order
        seen[o["request_id"]].append(o)
    rows = []
    for rid, obs in seen.items():
        failed = sum(1 for o in obs if not o["passed"])
        flips = sum(1 for a, b in zip(obs, obs[1:]) if a["passed"] != b["passed"])
        setups: dict[tuple[str, str], set[bool]] = defaultdict(set)
        for o in obs:
            run = by_run[o["run_id"]]
            setups[(run["server_version"], run["flags_sha256"])].add(bool(o["passed"]))
        positions = Counter(o["divergence_position"] for o in obs
                            if o["divergence_position"] is not None)
        rows.append({
            "id": rid, "observed": len(obs), "failed": failed,
            "fail_rate": round(failed / len(obs), 4), "flips": flips,
            "flaky": any(len(v) == 2 for v in setups.values()),
            "statuses": dict(Counter(o["status"] for o in obs)),
            "first_divergence_positions": {str(k): n for k, n in sorted(positions.items())},
        })
    rows.sort(key=lambda r: (-int(r["flaky"]), -r["flips"], -min(r["failed"], r["observed"] - r["failed"]),
                             -r["failed"], r["id"]))
    return rows


def coverage(outcomes: list[dict[str, Any]], by_run: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Which cache-hit lengths and tiers the runs exercised, overall and per server version."""
    lengths: Counter[int] = Counter()
    tiers: Counter[str] = Counter()
    per_version: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"hit_lengths": Counter(), "tiers": Counter()})
    for o in outcomes:
        version = by_run[o["run_id"]]["server_version"]
        if o["cached_tokens"] is not None:
            lengths[o["cached_tokens"]] += 1
            per_version[version]["hit_lengths"][o["cached_tokens"]] += 1
        for tier, tokens in (json.loads(o["tiers"]) if o["tiers"] else {}).items():
            if not tokens:
                continue  # a tier that served nothing is not covered
            tiers[tier] += tokens
            per_version[version]["tiers"][tier] += tokens
    ordered = sorted(per_version, key=version_key)
    changes = []
    for a, b in zip(ordered, ordered[1:]):
        la, lb = set(per_version[a]["hit_lengths"]), set(per_version[b]["hit_lengths"])
        ta, tb = set(per_version[a]["tiers"]), set(per_version[b]["tiers"])
        if la != lb or ta != tb:
            changes.append({"from": a, "to": b, "hit_lengths_gained": sorted(lb - la),
                            "hit_lengths_lost": sorted(la - lb), "tiers_gained": sorted(tb - ta),
                            "tiers_lost": sorted(ta - tb)})
    return {
        "hit_lengths": {str(k): n for k, n in sorted(lengths.items())},
        "tiers": dict(sorted(tiers.items())),
        "by_version": {v: {"hit_lengths": {str(k): n for k, n in sorted(per_version[v]["hit_lengths"].items())},
                           "tiers": dict(sorted(per_version[v]["tiers"].items()))}
                       for v in ordered},
        "changes": changes,
    }


def goldens(store: HistoryStore) -> list[GoldenSelector]:
    """One selector per golden the history holds (by content key), most recent first."""
    seen: dict[str, str] = {}
    for run in store.list_runs():
        seen.setdefault(run["golden_key"], run["golden_name"])
    return [GoldenSelector(text=name, digest=key, exact=True) for key, name in seen.items()]
