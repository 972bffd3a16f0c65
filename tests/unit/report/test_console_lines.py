"""A failing report in words as a CI log shows it: every failing request named with what differs
where, in the JUnit message's wording, each line at most 120 characters (the verdict too), and a
request that missed its cache expectation named on the console and in JUnit."""

from __future__ import annotations

import json
from typing import Any
from xml.etree import ElementTree as ET

from cli.matrix_cmd import cell
from replay.report.views import (
    WIDTH,
    difference_phrase,
    first_failure_lines,
    fold,
    junit_xml,
    verdict_lines,
)
from tests.support import paths


def failing_report() -> dict[str, Any]:
    return json.loads((paths.DATA / "reports" / "failing.json").read_text())


def junit_messages(report: dict[str, Any]) -> dict[str, str]:
    root = ET.fromstring(junit_xml(report))
    return {c.get("name"): c.find("failure").get("message")
            for c in root.iter("testcase") if c.find("failure") is not None}


def diverged() -> dict[str, Any]:
    return next(r for r in failing_report()["requests"] if r.get("first_divergence"))


def test_console_junit_and_matrix_cell_say_where_a_request_differs_alike():
    r = {**diverged(), "token_divergence_position": 76}
    phrase = difference_phrase(r)
    assert phrase.endswith("; tokens diverge at position 76")
    assert phrase in first_failure_lines({"requests": [r]})[0]
    assert phrase in junit_messages({"verdict": "fail", "requests": [r]})[r["id"]]
    assert cell(r) == difference_phrase(r, terse=True)
    assert cell(r).startswith("first difference at ") and cell(r).endswith("tokens diverge at 76")


def test_a_diverged_request_that_also_missed_its_cache_hit_is_named_for_both():
    r = {**diverged(), "cache_problem": "cached_tokens 0 < 192 (mamba track interval 32)",
         "expected_min_cached": 192}
    lines = first_failure_lines({"requests": [r]})
    name = f"{r['id']}#{r['repeat']}"
    assert (f"{name} cache_miss: cached_tokens 0 < 192 (mamba track interval 32); expected at "
            "least 192 cached tokens") in lines
    assert lines[0].startswith(f"{name} {r['status']}: first difference at output position")
    message = junit_messages({"verdict": "fail", "requests": [r]})[r["id"]]
    assert "; cache_miss: cached_tokens 0 < 192" in message


def test_a_cache_miss_alone_names_its_request_and_why():
    report = failing_report()
    [miss] = [r for r in report["requests"] if r["status"] == "cache_miss"]
    lines = first_failure_lines(report)
    assert f"{miss['id']}#0 cache_miss: {miss['cache_problem']}; expected at least " \
           f"{miss['expected_min_cached']} cached tokens" in lines
    assert junit_messages(report)[miss["id"]].startswith(f"cache_miss: {miss['cache_problem']}")


def test_every_failing_request_is_named_in_lines_of_at_most_120_characters():
    report = failing_report()
    report["warnings"] = ["a long warning " * 12]
    many = [{**r, "id": f"g9/b{i}/t1"} for i, r in enumerate(report["requests"] * 2)
            if not r["passed"]]
    report["requests"] += many
    lines = first_failure_lines(report) + verdict_lines(report)
    assert max(len(line) for line in lines) <= WIDTH
    for r in report["requests"]:
        if not r["passed"]:
            assert any(line.startswith(f"{r['id']}#{r['repeat']} ") for line in lines), r["id"]
    assert lines[-len(verdict_lines(report))].startswith("FAIL: ")


def test_fold_breaks_after_clauses_and_indents_the_rest():
    line = "; ".join(["x" * 50, "y" * 50, "z" * 50])
    assert fold(line, 120) == ["x" * 50 + "; " + "y" * 50 + ";", "    " + "z" * 50]
    assert fold("short", 120) == ["short"]
