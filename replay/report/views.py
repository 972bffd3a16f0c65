"""Views of the report document in words: JUnit XML, one line per failure, the verdict line.

Each reads only the JSON document (`replay.report.document.report_dict`, docs/report.md), so it works the
same for a replay, a `golden diff`, a matrix profile and merged shard reports.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from collections.abc import Iterator
from typing import Any
from xml.etree import ElementTree as ET

from replay.report.control import control_note
from replay.report.results import CACHE_MISS

WIDTH = 120  # a console line's most characters: what a CI log viewer shows without scrolling


def junit_xml(report: dict[str, Any], suite_name: str = "golden-replay") -> str:
    """One testcase per request id (and repeat, when there are several)."""
    return "".join(junit_pieces(report, suite_name))


def junit_pieces(report: dict[str, Any], suite_name: str = "golden-replay") -> Iterator[str]:
    """`junit_xml`'s text in pieces, a testcase at a time (the very text ElementTree writes for the
    whole suite): a replay's requests are never held as one XML tree or one string."""
    requests = report.get("requests") or []
    repeats = (report.get("summary") or {}).get("repeats", 1)
    error = _error_case(report, suite_name)
    problems = _problem_cases(report, suite_name)
    suite = ET.Element("testsuite", name=suite_name, tests=str(max(1, len(requests))))
    suite.set("failures", str(sum(1 for r in requests if not r["passed"]) + len(problems)))
    suite.set("errors", str(len(error)))
    head = ET.tostring(suite, encoding="unicode", xml_declaration=True)
    if not requests and not error and not problems:
        yield head  # an empty suite: `<testsuite ... />`
        return
    yield head[:-len(" />")] + ">"
    yield from map(_tostring, error)
    for r in requests:
        case = ET.Element("testcase", classname=suite_name,
                          name=r["id"] if repeats == 1 else f"{r['id']}#{r['repeat']}")
        if not r["passed"]:
            ET.SubElement(case, "failure", message=failure_line(r), type=r["status"])
        yield _tostring(case)
    yield from map(_tostring, problems)
    yield "</testsuite>"


def _error_case(report: dict[str, Any], suite_name: str) -> list[ET.Element]:
    """The replay's error as a testcase of its own (none when it did not end in one)."""
    if report["verdict"] != "error":
        return []
    case = ET.Element("testcase", classname=suite_name, name="replay")
    ET.SubElement(case, "error", message=str(report.get("error")))
    return [case]


def _problem_cases(report: dict[str, Any], suite_name: str) -> list[ET.Element]:
    """The cache-tier and cache-hit problems, a failing testcase each."""
    cases = []
    for name, key, kind in (("cache-tier", "tier_problem", "cache_tier"),
                            ("cache-hits", "hit_problem", "no_cache_hits")):
        if report.get(key):
            case = ET.Element("testcase", classname=suite_name, name=name)
            ET.SubElement(case, "failure", message=report[key], type=kind)
            cases.append(case)
    return cases


def _tostring(element: ET.Element) -> str:
    return ET.tostring(element, encoding="unicode")


def difference_phrase(r: dict[str, Any], terse: bool = False) -> str | None:
    """Where a request's answer first differs and, when later, where its tokens diverge: the one
    wording of a divergence, shared by the JUnit message, the console lines and (`terse`, for a
    table cell) the matrix table; None for a request whose output did not differ."""
    f = r.get("first_divergence")
    if not f:
        return None
    at = "" if terse else "output position "
    phrase = f"first difference at {at}{f['position']} ({f['kind']})"
    t = r.get("token_divergence_position")
    if t is not None and t != f["position"]:
        phrase += f"; tokens diverge at {'' if terse else 'position '}{t}"
    return phrase


def prompt_phrase(r: dict[str, Any]) -> str | None:
    """Where a request's prompt logprobs first differ, or None."""
    p = r.get("prompt_logprobs")
    if not isinstance(p, dict) or p.get("identical", True):
        return None
    return (f"first difference at prompt position {p.get('first_position')}: golden logprob "
            f"{p.get('golden_logprob')}, replay {p.get('replay_logprob')}, {p.get('ulp')} ulp")


def cache_phrase(r: dict[str, Any]) -> str | None:
    """Why a request missed its cache expectation (`--expect-cache`), or None."""
    problem = r.get("cache_problem")
    if not problem:
        return None
    expected = r.get("expected_min_cached")
    floor = f"; expected at least {expected} cached tokens" if expected is not None else ""
    return f"{CACHE_MISS}: {problem}{floor}"


def _values(f: dict[str, Any], bits: bool) -> str:
    """Both sides' token and logprob at the first difference (and their bits), and the ULPs."""
    def side(name: str) -> str:
        raw = f" ({f[name + '_bits']})" if bits else ""
        return f"{name} token {f[name + '_token']} logprob {f[name + '_logprob']}{raw}"
    return f"{side('golden')}, {side('replay')}, {f['ulp']} ulp"


def failure_line(r: dict[str, Any]) -> str:
    """A failing request in one message (JUnit): what differs where, both sides' values and
    bits, a missed cache expectation, the control's word."""
    cache = cache_phrase(r)
    why = difference_phrase(r) or prompt_phrase(r)
    parts = [f"{r['status']}: {why}" if why else cache or r["status"]]
    f = r.get("first_divergence")
    parts += [_values(f, bits=True)] if f else []
    parts += [cache] if cache and why else []
    note = control_note(r)
    return "; ".join([*parts, *([note] if note else [])])


def request_lines(r: dict[str, Any], width: int = WIDTH) -> list[str]:
    """A failing request on the console, each line at most `width` characters: its id and what
    differs where (the JUnit wording), then both sides' values and its cache hit; a missed cache
    expectation on a line of its own that names the request too."""
    name = f"{r['id']}#{r['repeat']}"
    cache = cache_phrase(r)
    why = difference_phrase(r) or prompt_phrase(r)
    f = r.get("first_divergence")
    detail = [_values(f, bits=False)] if f else []
    detail.append(f"cached {r['cached_tokens']}{served_by(r)}")
    note = control_note(r)
    detail += [note] if note else []
    head = f"{name} {r['status']}: {why}" if why else f"{name} {cache or r['status']}"
    lines = [*fold(head, width), *fold("  " + "; ".join(detail), width)]
    return lines + (fold(f"{name} {cache}", width) if cache and why else [])


def fold(line: str, width: int = WIDTH, indent: str = "    ") -> list[str]:
    """`line` in lines of at most `width` characters: broken after its `; ` clauses where it can,
    within a clause at spaces; the lines after the first indented."""
    if len(line) <= width:
        return [line]
    room = width - 1  # a row broken after a clause ends with its `;`
    rows: list[str] = []
    current = ""
    for clause in line.split("; "):
        if current and len(f"{current}; {clause}") <= room:
            current = f"{current}; {clause}"
            continue
        if current:
            rows.append(current + ";")
        wrapped = textwrap.wrap(clause, room, initial_indent=indent if rows else "",
                                subsequent_indent=indent, break_on_hyphens=False) or [""]
        rows.extend(wrapped[:-1])
        current = wrapped[-1]
    return [*rows, current]


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


SHELL_WORD = re.compile(r"""(?:[^\s'"]+|'[^']*'|"[^"]*")+""")


def rerun_lines(report: dict[str, Any], width: int = WIDTH) -> list[str]:
    """The commands that rerun what did not pass (`rerun`: the one replay or matrix profile;
    `reruns`: each shard of a merged report that did not pass), each as `rerun: golden replay
    ...`, broken into shell continuation lines of at most `width` characters."""
    if report.get("reruns"):
        commands = list(report["reruns"])
    elif report.get("rerun") and report.get("verdict") == "fail":
        commands = [report["rerun"]]
    else:
        commands = []
    return [line for command in commands for line in shell_lines(f"rerun: {command}", width)]


def shell_lines(command: str, width: int = WIDTH) -> list[str]:
    """A shell command in lines of at most `width` characters (where its words allow), each but
    the last ending in ` \\`, so the lines pasted together still run it."""
    rows: list[str] = []
    current = ""
    for word in SHELL_WORD.findall(command):
        if current and len(f"{current} {word}") > width - 2:
            rows.append(current + " \\")
            current = "    " + word
        else:
            current = f"{current} {word}" if current else word
    return [*rows, current]


def verdict_lines(report: dict[str, Any], prefix: str = "", width: int = WIDTH) -> list[str]:
    """The verdict (after `prefix`) in lines of at most `width` characters."""
    return fold(prefix + verdict_line(report), width)


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
            f"({s['requests_diverged']} diverged, {s['cache_misses']} cache misses); "
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


def first_failure_lines(report: dict[str, Any], limit: int | None = None) -> list[str]:
    """Every failing request (or the first `limit`), in lines of at most WIDTH characters."""
    failing = [r for r in report.get("requests", []) if not r["passed"]]
    lines = [line for r in failing[:limit] for line in request_lines(r)]
    if limit is not None and len(failing) > limit:
        lines.append(f"... and {len(failing) - limit} more (see --report)")
    return lines
