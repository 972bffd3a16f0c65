"""What a report's fields mean to the page: its verdict, its requests and repeats, anchors.

Read tolerantly (values.py): a null summary is {}, entries that are not objects are skipped, a
matrix without a verdict is as bad as its worst profile.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from replay.report.html.styles import VERDICT_COLOURS, style_of
from replay.report.html.values import dict_field, int_or, list_field, slug


def verdict_of(report: dict[str, Any], matrix: dict[str, Any] | None = None) -> str:
    """The report's verdict; a matrix without one is as bad as its worst profile."""
    verdict = report.get("verdict")
    if is_verdict(verdict):
        return str(verdict)
    if matrix:
        sub = [verdict_of(r) for r in dict_field(matrix, "reports").values()
               if isinstance(r, dict)]
        for worst in ("error", "fail"):
            if worst in sub:
                return worst
        return "pass" if sub else "error"
    return "error"


def is_verdict(value: Any) -> bool:
    return isinstance(value, str) and value in VERDICT_COLOURS


def has_own_results(report: dict[str, Any]) -> bool:
    return bool(report.get("requests") or report.get("summary") or report.get("error"))


def summary_of(report: dict[str, Any]) -> dict[str, Any]:
    """The summary, or {} for an error report (where it is null)."""
    s = report.get("summary")
    return s if isinstance(s, dict) else {}


def requests_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in list_field(report, "requests") if isinstance(r, dict)]


def repeats_of(report: dict[str, Any]) -> int:
    summary = summary_of(report)
    declared = int_or(summary.get("repeats"), 1)
    seen = {int_or(r.get("repeat"), 0) for r in requests_of(report)}
    return max(declared, len(seen), 1)


def ordered_ids(requests: Iterable[dict[str, Any]]) -> list[str]:
    """Request ids in first-seen order (the golden's order)."""
    return list(dict.fromkeys(str(r.get("id")) for r in requests))


def worst(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The entry that decides a request's colour over repeats: the first failing one of the
    worst status, else the first."""
    failing = [e for e in entries if not e.get("passed", True)] or list(entries)
    return max(failing, key=lambda e: style_of(e.get("status")).rank)


def by_id(requests: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for r in requests:
        grouped.setdefault(str(r.get("id")), []).append(r)
    return grouped


def anchor(prefix: str, request: dict[str, Any]) -> str:
    return f"{prefix}req-{slug(str(request.get('id')))}-r{int_or(request.get('repeat'), 0)}"
