"""`golden report`: a report as one self-contained HTML page, or shard reports merged into one.

    golden report REPORT.json -o report.html
    golden report --merge r1.json r2.json ... [-o page.html] [--json merged.json] [--junit j.xml]

Works from reports downloaded from CI, without a golden or a server. Exit codes: without
`--merge` 0 written; with `--merge` the merged verdict (0 pass, 1 fail, 2 error), so a CI step
can fail on it; 2 when an input is not a report, when the shards do not belong together
(missing, duplicated or overlapping shards, another golden, other options or servers:
replay/report/merge.py), or when a file cannot be written, always with one line on stderr and
never a traceback. Matrix reports (`golden matrix --shard`) merge into a matrix report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def load_report(path: Path) -> dict[str, Any]:
    """The report document, or a UsageError saying in one line why this file is not one."""
    from replay.utils.errors import UsageError
    from replay.report.html import SCHEMA_PREFIX

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        what = f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise UsageError(f"{path} is not valid JSON: {what}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path} is not a golden-replay report: the JSON is not an object")
    schema = doc.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise UsageError(f"{path} is not a golden-replay report: schema {schema!r} does not start "
                         f"with {SCHEMA_PREFIX!r}")
    return doc


def report(
    reports: list[Path] = typer.Argument(..., metavar="REPORT.json...", help="Report(s) written by `golden replay --report`."),
    out: Path = typer.Option(None, "-o", "--out", help="The HTML page to write.", show_default=False),
    merge: bool = typer.Option(False, "--merge", help="Merge the reports of `--shard i/n` runs into one (docs/ci.md)."),
    json_out: Path = typer.Option(None, "--json", help="With --merge: write the merged JSON report here.", show_default=False),
    junit: Path = typer.Option(None, "--junit", help="With --merge: write the merged JUnit XML here.", show_default=False),
) -> None:
    """Render a JSON replay report as one self-contained HTML page (no network at view time),
    or with --merge turn shard reports into one report, JUnit file and page."""
    from cli import render
    from replay.utils.errors import UsageError
    from cli.options import global_settings
    from replay.jobs.publish import ReportFiles, publish
    from replay.report.files import write_reports

    if len(reports) > 1 and not merge:
        raise UsageError("several reports given: add --merge to merge shard reports")
    if not merge and (json_out or junit):
        raise UsageError("--json and --junit apply with --merge")
    if not merge and out is None:
        raise UsageError("give -o PAGE.html")
    docs = [load_report(p) for p in reports]
    if not merge:
        try:
            write_reports(docs[0], html=out)  # a view of someone's report: not a run
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
        render.out.print(f"wrote {out}", markup=False)
        return
    from replay.report.merge import merge_reports

    doc = merge_reports(docs, [str(p) for p in reports])
    try:
        if "matrix" in doc:
            from cli.matrix_cmd import print_matrix
            from replay.jobs.matrix import matrix_junit

            publish(doc, ReportFiles(report=json_out, junit=junit, html=out,
                                     junit_text=matrix_junit(doc) if junit else None),
                    history=global_settings().history)
            print_matrix(doc)
        else:
            publish(doc, ReportFiles(report=json_out, junit=junit, html=out),
                    history=global_settings().history)
            render.print_outcome(doc)
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename or 'the merged report'}: "
                         f"{exc.strerror or exc}") from None
    raise typer.Exit({"pass": 0, "fail": 1}.get(doc["verdict"], 2))
