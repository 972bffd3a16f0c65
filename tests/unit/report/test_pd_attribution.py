"""A replay through a prefill/decode router, in words and on the page: every failing request
names the pair that served it, and the verdict line names the failing pair (docs/topologies.md).
The report is the committed failing sample with a PD router's fields added."""

from __future__ import annotations

import json
from typing import Any

from replay.report.html import render_html
from replay.report.views import request_lines, verdict_line
from tests.support import paths

PREFILL = {"index": 0, "role": "prefill", "url": "http://127.0.0.1:1", "fault": None,
           "requests": 4, "failed": 1}
DECODE = {"index": 1, "role": "decode", "url": "http://127.0.0.1:2", "fault": None,
          "requests": 4, "failed": 1}


def pd_report() -> dict[str, Any]:
    report = json.loads((paths.DATA / "reports" / "failing.json").read_text())
    for r in report["requests"]:
        r.update(prefill_worker=0, decode_worker=1, routing_note=None)
    report["routing"] = {
        "profile": "pd-cpu", "kind": "pd", "policy": "round_robin", "expected_hits": 0,
        "hits_met": 0, "routing_misses": 0, "per_worker": [PREFILL, DECODE],
        "failing_workers": [0, 1],
        "failing_pairs": [{"prefill_worker": 0, "decode_worker": 1, "failed": 1}]}
    return report


def test_each_failing_request_line_names_its_prefill_and_decode_worker():
    failing = [r for r in pd_report()["requests"] if not r["passed"]]
    texts = [" ".join(ln.strip() for ln in request_lines(r)) for r in failing]
    assert texts and all(t.endswith("; prefill worker 0 -> decode worker 1") for t in texts)


def test_the_verdict_line_names_the_failing_pair():
    line = verdict_line(pd_report())
    assert "over 1 prefill + 1 decode workers (PD)" in line
    assert ("1 failure(s) on pair prefill worker 0 (http://127.0.0.1:1) -> decode worker 1 "
            "(http://127.0.0.1:2)") in line


def test_the_html_report_shows_both_halves_of_a_failing_request():
    page = render_html(pd_report())
    assert page.count("prefill worker 0 -&gt; decode worker 1") >= 2  # table row and section
