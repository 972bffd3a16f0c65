"""`golden report REPORT.json -o report.html`: a replay report as one self-contained HTML page.

Registered in cli/main.py with `app.command("report")(report)`. Kept apart from main.py so that
the page can be produced from a report downloaded from CI, without a golden or a server.
Exit codes follow the rest of the CLI: 0 written, 2 the input is not a report (or the page
cannot be written), always with one line on stderr and never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from cli import render
from replay.errors import UsageError
from replay.html_report import SCHEMA_PREFIX, write_html


def load_report(path: Path) -> dict[str, Any]:
    """The report document, or a UsageError saying in one line why this file is not one."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path} is not a golden-replay report: the JSON is not an object")
    schema = doc.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise UsageError(f"{path} is not a golden-replay report: schema {schema!r} does not start "
                         f"with {SCHEMA_PREFIX!r}")
    return doc


def report(
    report_json: Path = typer.Argument(..., metavar="REPORT.json",
                                       help="A report written by `golden replay --report`."),
    out: Path = typer.Option(..., "-o", "--out", help="The HTML page to write."),
) -> None:
    """Render a JSON replay report as one self-contained HTML page (no network at view time)."""
    try:
        doc = load_report(report_json)
        write_html(doc, out)
    except UsageError as exc:
        render.err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    except OSError as exc:
        render.err.print(f"error: cannot write {out}: {exc.strerror or exc}", markup=False)
        raise typer.Exit(2) from None
    render.out.print(f"wrote {out}", markup=False)
