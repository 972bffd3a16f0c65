"""Views of the report document in words: JUnit XML, one line per failure, the verdict line.

Each reads only the JSON document (`replay.report.document.report_dict`, docs/report.md), so it works the
same for a replay, a `golden diff`, a matrix profile and merged shard reports.
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from xml.etree import ElementTree as ET

from replay.report.control import control_note


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
    if report.get("hit_problem"):
        case = ET.SubElement(suite, "testcase", classname=suite_name, name="cache-hits")
        ET.SubElement(case, "failure", message=report["hit_problem"], type="no_cache_hits")
        failures += 1
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def failure_line(r: dict[str, Any]) -> str:
    note = control_note(r)
    line = _failure_line(r)
    return f"{line}; {note}" if note else line


def _failure_line(r: dict[str, Any]) -> str:
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


def short_failure_line(r: dict[str, Any]) -> str:
    """One failing request in a terminal's width: where and how it first differs (the golden's
    value exactly and the distance in ULPs; the report has both sides' bits) and its cache hit."""
    note = control_note(r)
    line = _short_failure_line(r)
    return f"{line}; {note}" if note else line


def _short_failure_line(r: dict[str, Any]) -> str:
    f = r.get("first_divergence")
    cached = f"cached {r['cached_tokens']}"
    if not f:
        return f"{r['status']}: {r.get('cache_problem') or cached}{served_by(r)}"
    if f["kind"] == "token":
        what = f"token {f['golden_token']} -> {f['replay_token']}"
    else:
        where = " (top-k)" if f["kind"] == "top_k" else ""
        what = f"token {f['golden_token']}{where} logprob {f['golden_logprob']!r} off by {f['ulp']} ulp"
    line = f"{r['status']} at {f['position']}: {what}; {cached}"
    t = r.get("token_divergence_position")
    if t is not None and t != f["position"]:
        line += f"; tokens from {t}"
    return line + served_by(r)


def served_by(r: dict[str, Any]) -> str:
    """`; prefill worker P -> decode worker D` for a request served through a PD router."""
    if r.get("prefill_worker") is None:
        return ""
    return f"; prefill worker {r['prefill_worker']} -> decode worker {r['decode_worker']}"


def flake_lines(report: dict[str, Any], limit: int = 30) -> list[str]:
    """After several repeats: each request that failed in some of them, how often and how."""
    repeats = (report.get("summary") or {}).get("repeats", 1)
    if repeats <= 1:
        return []
    kinds: dict[str, Counter[str]] = {}
    for r in report.get("requests") or []:
        if not r["passed"]:
            kinds.setdefault(r["id"], Counter())[r["status"]] += 1
    ranked = sorted(kinds.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    lines = [f"{rid}: failed {sum(c.values())}/{repeats} repeats ("
             + ", ".join(f"{k} x{n}" for k, n in c.most_common()) + ")"
             for rid, c in ranked[:limit]]
    if len(ranked) > limit:
        lines.append(f"... and {len(ranked) - limit} more request(s) (see --report)")
    return lines


def verdict_line(report: dict[str, Any]) -> str:
    """The one-line verdict; for an error report, `error: ...` (the CLI prints it on stderr)."""
    if report["verdict"] == "error":
        return f"error: {report['error']}"
    s = report["summary"]
    hits = ", ".join(f"{k}x{v}" for k, v in s["cache_hit_lengths"].items())
    tiers = ", ".join(f"{k}={v}" for k, v in sorted(s["cached_tokens_by_tier"].items())) or "-"
    head = "PASS" if report["verdict"] == "pass" else "FAIL"
    line = (f"{head}: {s['requests']} requests x {s['repeats']} repeat(s), "
            f"{s['tokens_compared']} tokens compared, {s['requests_failed']} failed "
            f"({s['requests_diverged']} diverged, {s['cache_misses']} cache misses), "
            f"policy {report['policy']}, max ulp {s['max_ulp']}; "
            f"cache {report['expect_cache']}: hit lengths [{hits}], cached tokens by tier [{tiers}]")
    for problem in (report.get("tier_problem"), report.get("hit_problem")):
        if problem:
            line += f"; {problem}"
    if report.get("routing"):
        line += f"; {routing_text(report['routing'])}"
    if report.get("control"):
        line += f"; {control_text(report['control'])}"
    for warning in report.get("warnings") or []:
        line += f"; warning: {warning}"
    return line


def routing_text(routing: dict[str, Any]) -> str:
    """What the routing achieved, and which worker failed (docs/topologies.md)."""
    rate = (f"{routing['hits_met']}/{routing['expected_hits']} expected hits met"
            if routing["expected_hits"] else "no hit expected")
    roles = Counter(w.get("role", "worker") for w in routing["per_worker"])
    over = (f"{roles['prefill']} prefill + {roles['decode']} decode workers (PD)"
            if routing.get("kind") == "pd" else f"{len(routing['per_worker'])} workers")
    text = f"routing {routing['policy']} over {over}: {rate}"
    if routing["routing_misses"]:
        text += (f", {routing['routing_misses']} miss(es) the routing caused (prefix on another "
                 "worker; not cache bugs)")
    if routing.get("prompt_only_hits"):
        text += (f", {routing['prompt_only_hits']} follow-up hit(s) stop at the parent's prompt "
                 "(its output was decoded on the decode worker, never in a prefill worker's "
                 "cache; not cache bugs)")
    if routing.get("kind") == "pd":  # prefill/decode: failures by the pair that served them
        return text + "".join(pd_pair_text(routing, p) for p in routing["failing_pairs"])
    for w in routing["per_worker"]:
        if w["failed"]:
            fault = f", fault {w['fault']}" if w.get("fault") else ""
            text += f"; {w['failed']} failure(s) on worker {w['index']} ({w['url']}{fault})"
    return text


def pd_pair_text(routing: dict[str, Any], pair: dict[str, Any]) -> str:
    workers = {w["index"]: w for w in routing["per_worker"]}
    prefill, decode = workers[pair["prefill_worker"]], workers[pair["decode_worker"]]
    fault = f", fault {prefill['fault']}" if prefill.get("fault") else ""
    return (f"; {pair['failed']} failure(s) on pair prefill worker {prefill['index']} "
            f"({prefill['url']}{fault}) -> decode worker {decode['index']} ({decode['url']})")


def control_text(control: dict[str, Any]) -> str:
    """What the control replay said of the failures (docs/control.md)."""
    return (f"control {control['target']}: {control['failed_on_tier_only']} failure(s) the "
            f"tier's alone, {control['failed_on_control_too']} also on the control "
            f"({control['same_bits_on_control']} with the same bits), "
            f"{control.get('not_comparable', 0)} not comparable (the control reused other "
            f"KV); the control itself "
            f"{control['verdict']}ed with {control['requests_failed']} failure(s)")


def first_failure_lines(report: dict[str, Any], limit: int = 30) -> list[str]:
    failing = [r for r in report.get("requests", []) if not r["passed"]]
    lines = [f"{r['id']}#{r['repeat']} {short_failure_line(r)}" for r in failing[:limit]]
    if len(failing) > limit:
        lines.append(f"... and {len(failing) - limit} more (see --report)")
    return lines
