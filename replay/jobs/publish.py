"""Publishing a run's report: its files first, then the results history.

The report layer only writes files (replay/report/files.py); a history is fed here, one step
above it, so that what a command writes and what the history keeps are decided in one place.
The files go first: a history that cannot be reached or refuses the run still leaves them (the
verdict is never lost), and the command then fails with the history's one-line error (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay.report.files import write_reports

@dataclass(frozen=True)
class ReportFiles:
    """The files a command writes for one report document (each optional)."""

    report: Path | None = None  # the JSON document
    junit: Path | None = None
    html: Path | None = None
    junit_text: str | None = None  # overrides the replay JUnit view (the matrix's)


def publish(doc: dict[str, Any], files: ReportFiles = ReportFiles(), *,
            history: str | None = None) -> None:
    """Write the report's files, then add the document to the `history` location, if given
    (a value, never read from the environment)."""
    write_reports(doc, report=files.report, junit=files.junit, html=files.html,
                  junit_text=files.junit_text)
    if history is not None:
        from replay.history.commands import add_documents

        add_documents(history, [doc])
