"""Writing report files: JSON, JUnit and HTML, each replaced atomically. Files only: the
results history is fed one step above, by replay/jobs/publish.py (docs/history.md).

A report file is either the complete new document or the previous file untouched: each is
written to a temporary file beside it, flushed to disk, then renamed over the target. A crash or
a full disk therefore never leaves a truncated report, nor half of a new one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from replay.utils.json_arrays import json_chunks


def write_atomic(path: Path, text: str | Iterable[str], *, mode: int | None = None) -> None:
    """`text` (or its pieces, written as they come) into `path`, whole or not at all; `mode`
    (e.g. 0o755) is set before the rename, else the mode a plain `open` would give (0o666 less
    the umask), as goldens and logs get:
    the temporary file's own 0o600 would hide a report from the CI user who uploads it."""
    path = Path(path)
    mode = mode if mode is not None else 0o666 & ~current_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for piece in [text] if isinstance(text, str) else text:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, path)
    except OSError as exc:  # e.g. a full disk: name the file, not the temporary one
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process's umask, read without changing it where the system tells it (Linux's
    /proc/self/status); elsewhere set and put back at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def remove_stale(*paths: Path | None) -> None:
    """Remove a previous run's report files before a run starts: a run killed outright (even by
    SIGKILL) then leaves no report rather than a stale verdict."""
    for path in paths:
        if path is not None:
            Path(path).unlink(missing_ok=True)


def json_text(doc: dict[str, Any]) -> str:
    return "".join(json_pieces(doc))


def json_pieces(doc: dict[str, Any]) -> Iterator[str]:
    """The JSON file of `doc` (indent 1, strict JSON), in pieces: a report's requests are
    written one at a time, never held as one text."""
    yield from json_chunks(doc)
    yield "\n"


def write_reports(doc: dict[str, Any], *, report: Path | None = None, junit: Path | None = None,
                  html: Path | None = None, junit_text: str | None = None) -> None:
    """Each requested view of one report document (`junit_text` overrides the replay JUnit
    view, e.g. the matrix's one suite per profile)."""
    if report:
        write_atomic(report, json_pieces(doc))
    if junit:
        from replay.report.views import junit_pieces

        write_atomic(junit, junit_text if junit_text is not None else junit_pieces(doc))
    if html:
        from replay.report.html import render_html

        write_atomic(html, render_html(doc))
