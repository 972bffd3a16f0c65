"""The failing requests: a table of all of them, then the first MAX_DETAILED drawn in full.

A drawn request shows what diverged first (divergence.py), its deltas by output position
(charts.py) and the top-k there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from replay.report.control import control_note
from replay.report.html.charts import position_chart
from replay.report.html.divergence import first_divergence_table, top_k_table
from replay.report.html.fields import anchor
from replay.report.html.styles import style_of
from replay.report.html.values import dict_field, esc, fmt, fmt_approx, int_or, list_field
from replay.report.views import served_by


MAX_DETAILED = 60  # failing (request, repeat) entries drawn in full; the rest are listed only


def failing(requests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in requests if not r.get("passed", True)]


def failing_table_card(requests: Sequence[dict[str, Any]], prefix: str) -> str:
    bad = failing(requests)
    if not bad:
        if requests:
            return (f"<div class=\"card\" id=\"{prefix}failing\"><h2>Failing requests</h2>"
                    "<p class=\"muted\">None: every request passed.</p></div>")
        return ""
    with_control = any("control_status" in r for r in bad)
    rows = []
    for r in bad:
        f = dict_field(r, "first_divergence")
        control = f"<td>{esc(control_note(r) or '')}</td>" if with_control else ""
        style = style_of(r.get("status"))
        rows.append(
            f"<tr><td class=\"mono\"><a href=\"#{esc(anchor(prefix, r))}\">{esc(r.get('id'))}</a>"
            f"</td><td class=\"num\">{fmt(r.get('repeat'))}</td><td><span class=\"pill\" "
            f"style=\"background:{style.fill};color:{style.stroke}\">{esc(r.get('status'))}"
            f"</span></td><td class=\"num\">{fmt(f.get('position'))}</td>"
            f"<td>{fmt(f.get('kind'))}</td><td class=\"num\">{fmt(f.get('ulp'))}</td>"
            f"<td class=\"num\">{fmt(r.get('cached_tokens'))}</td>"
            f"<td class=\"num\">{fmt(r.get('expected_min_cached'))}</td>"
            f"<td>{fmt(r.get('cache_problem'))}{esc(served_by(r))}</td>{control}</tr>")
    return (f"<div class=\"card\" id=\"{prefix}failing\"><h2>Failing requests "
            f"({len(bad)})</h2><div class=\"scroll\"><table><tr><th>request</th><th>repeat</th>"
            "<th>status</th><th>first pos</th><th>kind</th><th>ulp</th><th>cached</th>"
            f"<th>expected \u2265</th><th>cache problem</th>"
            f"{'<th>control</th>' if with_control else ''}</tr>{''.join(rows)}</table>"
            "</div></div>")


def failing_details(requests: Sequence[dict[str, Any]], prefix: str) -> str:
    bad = failing(requests)
    sections = [request_section(r, prefix) for r in bad[:MAX_DETAILED]]
    if len(bad) > MAX_DETAILED:
        sections.append(f"<p class=\"muted\">{len(bad) - MAX_DETAILED} more failing requests are "
                        "listed in the table above but not drawn.</p>")
    return "\n".join(sections)


def request_section(r: dict[str, Any], prefix: str) -> str:
    """One failing request: what diverged first, the deltas by position, the top-k there."""
    style = style_of(r.get("status"))
    detail = dict_field(r, "detail")
    first = dict_field(r, "first_divergence")
    marker = int_or(first.get("position"), -1)
    meta = " \u00b7 ".join((
        f"repeat {fmt(r.get('repeat'))}", f"{fmt(r.get('tokens_compared'))} tokens compared",
        f"max ulp {fmt(r.get('max_ulp'))}", f"mean kl {fmt_approx(r.get('mean_kl'))}",
        f"cached {fmt(r.get('cached_tokens'))} {fmt(dict_field(r, 'cached_tokens_details'))}",
        f"expected \u2265 {fmt(r.get('expected_min_cached'))}")) + esc(served_by(r))
    parts = [f"<section class=\"card req\" id=\"{esc(anchor(prefix, r))}\" "
             f"data-status=\"{esc(r.get('status'))}\" style=\"border-left-color:{style.stroke}\">"
             f"<h3><span class=\"mono\">{esc(r.get('id'))}</span> <span class=\"pill\" "
             f"style=\"background:{style.fill};color:{style.stroke}\">{esc(r.get('status'))}"
             f"</span></h3><div class=\"meta\">{meta}</div>"]
    if r.get("cache_problem"):
        parts.append(f"<div class=\"alert\" style=\"border-color:#5e35b1;background:#ede7f6\">"
                     f"<b>cache:</b> {esc(r['cache_problem'])}</div>")
    if control_note(r):
        parts.append(f"<div class=\"alert\"><b>control:</b> {esc(control_note(r))}</div>")
    if first:
        parts.append(first_divergence_table(first))
    abs_delta, ulps = list_field(detail, "abs_delta"), list_field(detail, "ulp")
    if abs_delta or ulps:
        parts.append("<div class=\"charts\">"
                     + position_chart("|\u0394 logprob| by output position", abs_delta, marker,
                                      "abs-delta")
                     + position_chart("ULP distance by output position", ulps, marker, "ulp",
                                      integers=True)
                     + "</div>")
    if isinstance(detail.get("top_k"), dict):
        parts.append(top_k_table(detail["top_k"]))
    parts.append("</section>")
    return "".join(parts)
