"""The whole page for one report document: a plain report, a matrix report, or both.

Pure: `render_html` takes the report dict and returns a string; only `write_html` touches disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.report.html.body import report_body
from replay.report.html.fields import has_own_results, verdict_of
from replay.report.html.frame import page, page_banner
from replay.report.html.matrix import matrix_profile_sections, matrix_section


def render_html(report: dict[str, Any]) -> str:
    """The whole page for one report document (a plain report, a matrix report, or both)."""
    matrix = report.get("matrix") if isinstance(report.get("matrix"), dict) else None
    parts = [page_banner(report, matrix)]
    if matrix is not None:
        parts.append(matrix_section(matrix))
    if matrix is None or has_own_results(report):
        parts.append(report_body(report, prefix="r-"))
    if matrix is not None:
        parts.extend(matrix_profile_sections(matrix))
    title = f"golden-replay {verdict_of(report, matrix)}: {report.get('golden') or ''}"
    return page(title, "\n".join(parts))


def write_html(report: dict[str, Any], path: str | Path) -> None:
    """Render and write the page (UTF-8)."""
    Path(path).write_text(render_html(report), encoding="utf-8")
