"""Shards come back together: the reports of `--shard i/n` runs merged into one report.

Each shard replays whole conversation trees of the same golden on its own runner, so the merged
document is the union of their requests. Nothing a shard says about itself is trusted: the
verdict, the summary and `--require-tier` are recomputed from the requests (a shard that says
`pass` over failing requests merges to `fail`). The merge refuses (UsageError, exit 2), in one
line, anything whose union would mean nothing or would hide a shard:
- a document that is not a replay report (no requests list, an unknown verdict, a request
  without an id or a `passed` judgement), or matrix and plain reports mixed;
- a report that is not a shard, shards of different counts, a shard missing or given twice, a
  request in two shards, a shard holding other than its share of requests;
- shards of different goldens (by content checksum, `golden_sha256`, not by file name), or with
  different policies, repeats, cache or tier expectations, or servers (launch profile or URL as
  given, served model, numerics).
Matrix reports (`golden matrix --shard`) merge profile by profile into a matrix report.
The merge only computes the union of the requests and what follows from it (the tier and hit
problems); the document itself is written by the one report builder (document.build_report).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from replay.golden.fingerprint import model_identity
from replay.golden.shard import parse_shard
from replay.golden.tree import parse_request_id
from replay.report.document import (VERDICT_RANK, RunFacts, RunSetup, build_report,
                                    hit_lengths_of, matrix_report, tiers_of)
from replay.report.results import NO_HITS_WARNING
from replay.utils.errors import UsageError
from replay.utils.json_arrays import is_array

# What shards of one replay must share, beyond the golden: (report field, what it is called).
SAME_SETUP = (("policy", "policies"), ("repeat", "repeat counts"),
              ("expect_cache_asked", "cache expectations"), ("require_tier", "tier expectations"),
              ("server_target", "servers"))


def merge_reports(docs: Sequence[dict[str, Any]],
                  names: Sequence[str] | None = None) -> dict[str, Any]:
    """One report document for all the shard reports of one replay (`names`: how to call each
    document in a refusal, e.g. its file)."""
    if not docs:
        raise UsageError("give at least one report to merge")
    names = list(names) if names is not None else [f"report {i + 1}" for i in range(len(docs))]
    matrix = ["matrix" in d for d in docs]
    if any(matrix) and not all(matrix):
        raise UsageError("cannot merge matrix reports with replay reports")
    if all(matrix):
        return _merge_matrices(docs, names)
    return _merge_shards(docs, names)


def _merge_matrices(docs: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    profiles = []
    for doc, name in zip(docs, names):
        m = doc.get("matrix")
        if not (isinstance(m, dict) and isinstance(m.get("profiles"), list) and m["profiles"]
                and isinstance(m.get("reports"), dict)
                and all(isinstance(p, str) and isinstance(m["reports"].get(p), dict)
                        for p in m["profiles"])):
            raise UsageError(f"{name} is not a matrix report: no profiles and reports")
        profiles.append(list(m["profiles"]))
    if any(p != profiles[0] for p in profiles):
        raise UsageError("cannot merge matrix reports of different profiles: "
                         + " vs ".join(sorted({", ".join(p) for p in profiles})))
    reports = {}
    for p in profiles[0]:
        reports[p] = _merge_shards([d["matrix"]["reports"][p] for d in docs],
                                   [f"{name} ({p})" for name in names])
        reports[p]["profile"] = p
    first = reports[profiles[0][0]]
    return matrix_report(reports, golden=first["golden"], policy=first["policy"], shard=None,
                         merged_from=[{"shard": d.get("shard"), "verdict": d.get("verdict")}
                                      for d in docs])


def _merge_shards(docs: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    for doc, name in zip(docs, names):
        _check_is_report(doc, name)
    _check_complete(docs, names)
    ok = [d for d in docs if d["verdict"] != "error"]
    _check_same_golden(docs, names)
    for key, what in SAME_SETUP:
        _same(docs, key, what)
    _same(ok, "server_model", "servers (served models)", _server_model)
    _same(ok, "numerics", "servers (numerics)", _server_numerics)
    requests = [r for d in docs for r in d["requests"]]
    _check_disjoint(requests)
    _check_shares(ok, names)
    requests.sort(key=_order)
    errors = [f"shard {d['shard']}: {d.get('error')}" for d in docs if d["verdict"] == "error"]
    require_tier = docs[0].get("require_tier")
    tiers = tiers_of(requests)
    tier_problem = None
    if require_tier and not errors and tiers.get(require_tier, 0) == 0:
        seen = ", ".join(f"{k}={v}" for k, v in sorted(tiers.items())) or "none"
        tier_problem = (f"no cache hits came from the {require_tier} tier in any shard "
                        f"(tokens by tier: {seen})")
    no_hits = not errors and bool(requests) and all(_count(r.get("cached_tokens")) == 0
                                                    for r in requests)
    hit_problem = None
    if no_hits and any(d.get("hit_problem") for d in ok):
        hit_problem = ("no request was served from the cache in any shard, though the cache "
                       f"expectation {first_of(ok, 'expect_cache')} asks for hits")
    first = ok[0] if ok else docs[0]
    golden_meta = dict(first.get("golden_meta") or {})
    golden_meta.pop("shard", None)
    facts = RunFacts(
        expect_cache=first.get("expect_cache"),
        require_tier=require_tier,
        tier_problem=tier_problem,
        no_cache_hits=no_hits,
        hit_problem=hit_problem,
        storage_cleared=sum(_count(d.get("storage_cleared")) for d in ok),
        storage_hits_after_clear=[h for d in ok for h in d.get("storage_hits_after_clear") or []],
        warnings=list(dict.fromkeys(w for d in ok for w in d.get("warnings") or []
                                    if not str(w).startswith("--require-tier ")
                                    and (no_hits or not str(w).startswith(NO_HITS_WARNING)))),
        numerics=first.get("numerics"),
        golden_meta=golden_meta,
        server_meta=first.get("server_meta") or {},
        merged_from=[{"server": d.get("server"), "verdict": d.get("verdict"),
                      "shard": d.get("shard"), "run_id": d.get("run_id")} for d in docs],
        repeats=_count(first.get("repeat")) or 1,
        hit_lengths=hit_lengths_of(requests),
        tiers=tiers,
    )
    setup = RunSetup(
        golden_sha256=next((d["golden_sha256"] for d in docs if d.get("golden_sha256")), None),
        shard=None, repeat=first.get("repeat"), expect_cache=first.get("expect_cache_asked"),
        require_tier=require_tier, target=first.get("server_target"),
        **_client(first.get("client")))
    doc = build_report(requests, facts, golden=first.get("golden"),
                       server=", ".join(dict.fromkeys(str(d.get("server")) for d in docs)),
                       policy=first.get("policy"), error="; ".join(errors) if errors else None,
                       setup=setup, partial=bool(errors))
    reruns = [d["rerun"] for d in docs if isinstance(d.get("rerun"), str)
              and (d["verdict"] != "pass" or not all(r["passed"] for r in d["requests"]))]
    if reruns:  # the command of each shard that did not pass, as that shard's report gave it
        doc["reruns"] = reruns
    return doc


def first_of(docs: Sequence[dict[str, Any]], key: str) -> Any:
    return docs[0].get(key) if docs else None


def _check_is_report(doc: dict[str, Any], name: str) -> None:
    """A replay report: a verdict, a list of requests each with an id and a judgement."""
    if not isinstance(doc.get("verdict"), str) or doc["verdict"] not in VERDICT_RANK:
        raise UsageError(f"{name} is not a replay report: verdict {doc.get('verdict')!r}")
    requests = doc.get("requests")
    if not is_array(requests):
        raise UsageError(f"{name} is not a replay report: no requests list")
    for r in requests:
        if not (isinstance(r, dict) and isinstance(r.get("id"), str)
                and isinstance(r.get("passed"), bool)
                and isinstance(r.get("repeat"), int) and not isinstance(r.get("repeat"), bool)):
            raise UsageError(f"{name} is not a replay report: a request without an id, repeat "
                             "or passed judgement")
    if doc["verdict"] != "error" and not requests:
        raise UsageError(f"{name} says {doc['verdict']} with no requests")


def _check_complete(docs: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    """Every shard 1..n exactly once, all of the same n."""
    specs = []
    for doc, name in zip(docs, names):
        shard = doc.get("shard")
        if not isinstance(shard, str):
            raise UsageError(f"{name} is not a shard report (replayed without --shard, or written "
                             "by an older golden-replay): nothing to merge it with")
        try:
            specs.append(parse_shard(shard))
        except UsageError:
            raise UsageError(f"{name}: invalid shard {shard!r}") from None
    counts = sorted({s.count for s in specs})
    if len(counts) > 1:
        raise UsageError(f"cannot merge shards of different splits: {', '.join(map(str, specs))}")
    given = Counter(s.index for s in specs)
    twice = sorted(i for i, n in given.items() if n > 1)
    if twice:
        raise UsageError(f"shard {twice[0]}/{counts[0]} is given more than once")
    missing = [i for i in range(1, counts[0] + 1) if i not in given]
    if missing:
        raise UsageError(f"shard(s) {', '.join(f'{i}/{counts[0]}' for i in missing)} missing: "
                         "a merge of part of the shards would judge part of the golden")


def _check_same_golden(docs: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    sums = {}
    for doc, name in zip(docs, names):
        checksum = doc.get("golden_sha256")
        if isinstance(checksum, str):
            sums[name] = checksum
        elif doc["verdict"] != "error":
            raise UsageError(f"{name} does not name its golden's content (golden_sha256): "
                             "cannot tell which golden it replayed")
    if len(set(sums.values())) > 1:
        raise UsageError("cannot merge shards of different goldens (content checksums "
                         + ", ".join(f"{n}: {s[:12]}" for n, s in sums.items()) + ")")


def _same(docs: Sequence[dict[str, Any]], key: str, what: str, get: Any = None) -> None:
    values = {repr(get(d) if get else d.get(key)) for d in docs}
    if len(values) > 1:
        raise UsageError(f"cannot merge shards with different {what}: "
                         + ", ".join(sorted(values)))


def _server_model(doc: dict[str, Any]) -> str | None:
    meta = doc.get("server_meta") if isinstance(doc.get("server_meta"), dict) else {}
    info, model = meta.get("server_info"), meta.get("model_info")
    return model_identity(model if isinstance(model, dict) else {},
                          info if isinstance(info, dict) else {}).label


def _server_numerics(doc: dict[str, Any]) -> dict[str, Any]:
    numerics = doc.get("numerics") if isinstance(doc.get("numerics"), dict) else {}
    fields = numerics.get("fields") if isinstance(numerics.get("fields"), dict) else {}
    return {k: v.get("replay") if isinstance(v, dict) else v for k, v in sorted(fields.items())}


def _check_disjoint(requests: list[dict[str, Any]]) -> None:
    keys = Counter((r["id"], r["repeat"]) for r in requests)
    twice = sorted(k[0] for k, n in keys.items() if n > 1)
    if twice:
        raise UsageError(f"request {twice[0]} is in more than one shard (overlapping shards)")


def _check_shares(docs: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    """Each shard holds what its split said it would (requests x repeats), and the shards
    together the whole golden."""
    whole = set()
    for doc, name in zip(docs, names):
        meta = (doc.get("golden_meta") or {}).get("shard") if isinstance(
            doc.get("golden_meta"), dict) else None
        if not isinstance(meta, dict):
            raise UsageError(f"{name} does not say which requests its shard holds "
                             "(golden_meta.shard)")
        expected = _count(meta.get("requests")) * (_count(doc.get("repeat")) or 1)
        if len(doc["requests"]) != expected:
            raise UsageError(f"{name} holds {len(doc['requests'])} request results, but its shard "
                             f"has {expected}: an edited or truncated report")
        whole.add(meta.get("of_requests"))
    if len(whole) > 1:
        raise UsageError("cannot merge shards of goldens of different sizes")


def _order(request: dict[str, Any]) -> tuple[Any, ...]:
    parsed = parse_request_id(str(request.get("id"))) or (0, 0, 0)
    group, branch, turn = parsed
    return (request.get("repeat", 0), turn, group, branch, str(request.get("id")))


def _client(client: Any) -> dict[str, Any]:
    """The shards' client settings, for the merged document's setup."""
    if not isinstance(client, dict):
        return {}
    return {k: client.get(k) for k in ("concurrency", "schedule")}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
