"""One report's body: the cards of one replay, in page order (also each matrix profile's)."""

from __future__ import annotations

from typing import Any

from replay.report.html.cards import alerts, run_card, stats
from replay.report.html.failures import failing_details, failing_table_card
from replay.report.html.fields import repeats_of, requests_of, summary_of
from replay.report.html.fingerprints import fingerprint_card
from replay.report.html.grid import repeat_grid_card
from replay.report.html.histogram import histogram_card
from replay.report.html.tree_drawing import tree_card


def report_body(report: dict[str, Any], prefix: str) -> str:
    """Everything about one replay, anchors prefixed so that matrix profiles never collide."""
    parts = [alerts(report, prefix), stats(report, prefix)]
    requests = requests_of(report)
    tree = tree_card(requests, prefix) if requests else ""
    parts.append(f"<div class=\"row\">{tree}{fingerprint_card(report, prefix)}</div>")
    summary = summary_of(report)
    parts.append(f"<div class=\"row\">{histogram_card(report, prefix)}"
                 f"{run_card(report, summary, prefix)}</div>")
    if repeats_of(report) > 1 and requests:
        parts.append(repeat_grid_card(requests, prefix))
    parts.append(failing_table_card(requests, prefix))
    parts.append(failing_details(requests, prefix))
    return "\n".join(p for p in parts if p)
