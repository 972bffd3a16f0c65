"""What a user asks of the history about one golden, as one JSON-ready document:

- `timeline`: every run, oldest first: when, verdict, server version, flags, failures;
- `versions`: per server version (in version order) its runs, verdict counts, fail rate (failing
  runs / judged runs) and flake rate (requests flaky on it / requests: flaky as below);
- `bisect`: the first server version with a failing run and the last all-passing one before it
  (versions ordered by their numbers: "0.5.9" < "0.5.23"), and whether every later version
  fails too (`consistent`) or the failure comes and goes;
- `requests`: per request, how often it failed, how often its outcome flipped from one run to
  the next, and whether it is flaky (passed and failed on the same server version and flags),
  most unstable first;
- `coverage`: the cache-hit lengths and the tiers the runs exercised, overall and per version.
Error runs appear in the timeline and the counts but judge no request (they compared nothing).
A golden is its content: a golden directory or a digest selects the runs of that content only;
a name selects by name, and one that several goldens of other content had is refused, naming
them (`golden_keys`).
The counts come from the running tallies (schema.py) and the flips from one window over the
outcomes in index order, so `show` stays interactive over 10,000 runs (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

from replay.history.schema import NONE, hit_tallies, outcomes, request_tallies
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
        "run": run["id"], "run_id": run["run_id"], "at": iso(run["run_at"]),
        "golden": run["golden_name"], "golden_key": run["golden_key"], "verdict": run["verdict"],
        "server": run["server"], "server_version": run["server_version"],
        "profile": run["profile"], "flags": run["flags_sha256"][:12],
        "numerics": run["numerics_sha256"][:12],
        "client": json.loads(run["client"]) if run["client"] else None,
        "shard": run["shard"], "merged": bool(run["merged"]),
        "requests": run["requests"], "requests_failed": run["requests_failed"],
        "error": run["error"],
    }


class AmbiguousGolden(UsageError):
    """A name or digest prefix that several goldens (of other content) answer to."""


def golden_keys(store: HistoryStore, selector: GoldenSelector) -> list[str]:
    """The golden keys (content digests) the selector means: a directory's own digest; a digest
    prefix's one golden; a name's one golden. Several goldens behind a name or prefix are
    refused, naming them (runs of other content are never mixed in); none is an empty list."""
    condition = selector.by_digest()
    found = store.golden_names(condition) if condition is not None else {}
    if selector.digest:
        return list(found)
    what = "digest prefix"
    if not found:
        found, what = store.golden_names(selector.by_name()), "name"
    if len(found) > 1:
        listed = "; ".join(f"{k.split(':')[-1][:12]} ({', '.join(names[:3])})"
                           for k, names in list(found.items())[:5])
        raise AmbiguousGolden(f"the {what} {selector.text!r} matches {len(found)} goldens of "
                              f"other content in {store.where}: {listed}; give the golden "
                              "directory or more digits of its digest")
    return list(found)


def golden_history(store: HistoryStore, selector: GoldenSelector) -> dict[str, Any]:
    keys = golden_keys(store, selector)
    if not keys:
        what = (f"golden {selector.text} (content {selector.digest[:12]})" if selector.digest
                else repr(selector.text))
        raise UsageError(f"the history {store.where} has no run of {what}")
    runs = store.golden_runs(keys)
    counts = setup_counts(store, keys)
    versions = _versions(runs, flaky_by_version(counts))
    return {
        "schema": SCHEMA,
        "golden": selector.text,
        "golden_keys": keys,
        "names": sorted({r["golden_name"] for r in runs}),
        "runs": len(runs),
        "verdicts": dict(Counter(r["verdict"] for r in runs)),
        "timeline": [run_summary(r) for r in runs],
        "versions": versions,
        "bisect": bisect(versions),
        "requests": request_stability(store, keys, counts),
        "coverage": coverage(store, keys),
    }


def setup_counts(store: HistoryStore, keys: list[str]) -> list[dict[str, Any]]:
    """Outcomes counted by request, server version, flags, status and divergence position
    (the running tallies), from which the per-request and per-version figures are derived."""
    from sqlalchemy import select

    rows = store.rows(select(request_tallies).where(request_tallies.c.golden_key.in_(keys)))
    for r in rows:
        if r["divergence_position"] == NONE:
            r["divergence_position"] = None
    return rows


def flaky_by_version(counts: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per server version: (requests flaky there, requests observed). Flaky as in
    `request_stability`: passed and failed on one setup (this version and one flags key), so
    the version line and the requests never disagree."""
    setups: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    observed: dict[str, set[str]] = defaultdict(set)
    for c in counts:
        tally = setups[(c["server_version"], c["flags_sha256"], c["request_id"])]
        tally[0] += int(c["n"])
        tally[1] += int(c["passes"])
        observed[c["server_version"]].add(c["request_id"])
    flaky: dict[str, set[str]] = defaultdict(set)
    for (version, _, rid), (n, p) in setups.items():
        if 0 < p < n:
            flaky[version].add(rid)
    return {v: (len(flaky[v]), len(reqs)) for v, reqs in observed.items()}


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


def request_stability(store: HistoryStore, keys: list[str],
                      counts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per request id: observations, failures, flips between consecutive runs (in time order),
    flakiness (passed and failed on one server version and flags), most unstable first."""
    observed: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    statuses: dict[str, Counter[str]] = defaultdict(Counter)
    positions: dict[str, Counter[int]] = defaultdict(Counter)
    setups: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for c in counts:
        rid, n, passes = c["request_id"], int(c["n"]), int(c["passes"])
        observed[rid] += n
        failed[rid] += n - passes
        statuses[rid][c["status"]] += n
        if c["divergence_position"] is not None:
            positions[rid][c["divergence_position"]] += n
        tally = setups[(rid, c["server_version"], c["flags_sha256"])]
        tally[0] += n
        tally[1] += passes
    flaky = {rid for (rid, _, _), (n, p) in setups.items() if 0 < p < n}
    mixed = sorted(rid for rid in observed if 0 < failed[rid] < observed[rid])
    flips = _flips(store, keys, mixed)
    rows = [{"id": rid, "observed": observed[rid], "failed": failed[rid],
             "fail_rate": round(failed[rid] / observed[rid], 4), "flips": flips.get(rid, 0),
             "flaky": rid in flaky, "statuses": dict(statuses[rid]),
             "first_divergence_positions": {str(k): v for k, v in sorted(positions[rid].items())}}
            for rid in observed]
    rows.sort(key=lambda r: (-int(r["flaky"]), -r["flips"],
                             -min(r["failed"], r["observed"] - r["failed"]), -r["failed"], r["id"]))
    return rows


def _flips(store: HistoryStore, keys: list[str], request_ids: list[str]) -> dict[str, int]:
    """How often each request's outcome changed from one observation to the next, in time
    order: a window over its outcomes, read in the order of `ix_outcomes_sequence` (only
    requests that both passed and failed can flip)."""
    from sqlalchemy import case, func, select

    passed = case((outcomes.c.passed, 1), else_=0)
    found: dict[str, int] = {}
    for start in range(0, len(request_ids), 200):  # bounded IN lists
        chunk = request_ids[start:start + 200]
        ordered = (select(outcomes.c.request_id, passed.label("p"),
                          func.lag(passed).over(partition_by=outcomes.c.request_id,
                                                order_by=(outcomes.c.run_at, outcomes.c.run_id,
                                                          outcomes.c.position)).label("before"))
                   .where(outcomes.c.golden_key.in_(keys), outcomes.c.request_id.in_(chunk))
                   .subquery())
        flip = case((ordered.c.before.is_not(None) & (ordered.c.before != ordered.c.p), 1),
                    else_=0)
        for r in store.rows(select(ordered.c.request_id, func.sum(flip).label("flips"))
                            .group_by(ordered.c.request_id)):
            found[r["request_id"]] = int(r["flips"] or 0)
    return found


def coverage(store: HistoryStore, keys: list[str]) -> dict[str, Any]:
    """Which cache-hit lengths and tiers the runs exercised, overall and per server version."""
    from sqlalchemy import select

    lengths: Counter[int] = Counter()
    tiers: Counter[str] = Counter()
    per_version: dict[str, dict[str, Counter[Any]]] = defaultdict(
        lambda: {"hit_lengths": Counter(), "tiers": Counter()})
    for r in store.rows(select(hit_tallies).where(hit_tallies.c.golden_key.in_(keys))):
        version, n = r["server_version"], int(r["n"])
        if r["cached_tokens"] != NONE:
            lengths[r["cached_tokens"]] += n
            per_version[version]["hit_lengths"][r["cached_tokens"]] += n
        for tier, tokens in (json.loads(r["tiers"]) if r["tiers"] else {}).items():
            if not tokens:
                continue  # a tier that served nothing is not covered
            tiers[tier] += tokens * n
            per_version[version]["tiers"][tier] += tokens * n
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
        "by_version": {v: {"hit_lengths": {str(k): n for k, n in
                                           sorted(per_version[v]["hit_lengths"].items())},
                           "tiers": dict(sorted(per_version[v]["tiers"].items()))}
                       for v in ordered},
        "changes": changes,
    }


def goldens(store: HistoryStore) -> list[GoldenSelector]:
    """One selector per golden the history holds (by content key), most recent first."""
    seen: dict[str, str] = {}
    for run in store.list_runs():
        seen.setdefault(run["golden_key"], run["golden_name"])
    return [GoldenSelector(text=name, digest=key) for key, name in seen.items()]
