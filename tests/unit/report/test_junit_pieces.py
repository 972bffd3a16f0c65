"""The JUnit file is written a testcase at a time (`junit_pieces`), and its text is exactly what
ElementTree writes for the whole suite built at once (the one form it had before): a replay's
requests are never held as one XML tree, and no CI reader sees a byte of difference."""

from __future__ import annotations

import json
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from replay.report.views import failure_line, junit_pieces, junit_xml
from tests.support import paths


def whole_tree(report: dict[str, Any], suite_name: str = "golden-replay") -> str:
    """The suite built whole with ElementTree, as `junit_xml` did before it was streamed."""
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
    for name, key, kind in (("cache-tier", "tier_problem", "cache_tier"),
                            ("cache-hits", "hit_problem", "no_cache_hits")):
        if report.get(key):
            case = ET.SubElement(suite, "testcase", classname=suite_name, name=name)
            ET.SubElement(case, "failure", message=report[key], type=kind)
            failures += 1
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def failing() -> dict[str, Any]:
    return json.loads((paths.DATA / "reports" / "failing.json").read_text())


def reports() -> dict[str, dict[str, Any]]:
    bad = failing()
    odd = {**bad["requests"][0], "id": 'g0/b0/t0 <&> "quoted"\nline', "passed": False}
    return {
        "failing": bad,
        "two repeats": {**bad, "summary": {**bad.get("summary", {}), "repeats": 2}},
        "passing": {**bad, "verdict": "pass", "tier_problem": None, "hit_problem": None,
                    "requests": [{**r, "passed": True} for r in bad["requests"]]},
        "odd characters": {**bad, "requests": [odd]},
        "error": {"verdict": "error", "error": "server said <no> & \"left\"", "requests": []},
        "error with requests": {**bad, "verdict": "error", "error": "cut short"},
        "problems": {**bad, "tier_problem": "no hit from host", "hit_problem": "no hits\tat all"},
        "empty": {"verdict": "pass", "requests": []},
    }


@pytest.mark.parametrize("name", list(reports()))
def test_the_streamed_junit_is_the_text_of_the_suite_built_whole(name):
    report = reports()[name]
    assert "".join(junit_pieces(report, "suite")) == whole_tree(report, "suite")
    assert junit_xml(report) == whole_tree(report)


def test_a_testcase_is_written_as_it_is_made_from_the_requests():
    report = failing()
    pieces = list(junit_pieces(report))
    assert len(pieces) == len(report["requests"]) + 2 + bool(report.get("tier_problem")) + bool(
        report.get("hit_problem"))
