"""The HTML page's text as a reader sees it: a long server URL wraps in the fingerprint table
instead of being clipped, and a KL reads to three significant digits (the JSON keeps it exact)."""

from __future__ import annotations

import json
import re
from typing import Any

from replay.report.html import render_html
from replay.report.html.values import fmt_approx
from tests.support import paths

LONG_URL = "http://" + "very-long-host-name-" * 8 + "lab.example:30000/v1"


def failing() -> dict[str, Any]:
    return json.loads((paths.DATA / "reports" / "failing.json").read_text())


def test_the_fingerprint_values_may_break_anywhere_so_a_long_url_wraps():
    report = failing()
    report["server_meta"]["server_url"] = LONG_URL
    page = render_html(report)
    assert LONG_URL in page  # whole, not cut
    css = page[page.index("<style>"):page.index("</style>")]
    rule = re.search(r"\.fp td\+td\{([^}]*)\}", css)
    assert rule and "word-break:break-all" in rule.group(1)
    assert not re.search(r"\.fp td[^{]*\{[^}]*(text-overflow|white-space:nowrap)", css)


def test_a_kl_is_shown_to_three_significant_digits():
    report = failing()
    report["summary"]["mean_kl"] = 1.8843370261681608e-05
    next(r for r in report["requests"] if not r["passed"])["mean_kl"] = 7.893745257552437e-05
    page = render_html(report)
    assert "1.88e-05" in page and "7.89e-05" in page
    assert "1.8843370261681608e-05" not in page and "7.893745257552437e-05" not in page


def test_an_approximate_value_that_is_not_a_finite_float_is_shown_as_it_is():
    assert fmt_approx(0.0) == "0"
    assert fmt_approx("inf") == "inf" and fmt_approx(None) == "\u2014"
