"""Report files follow the umask as goldens and logs do (a CI user uploads them), whole or not
at all; an explicit mode (repro.sh's 0o755) is kept."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from replay.report.files import current_umask, write_atomic, write_reports


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_report_json_junit_and_html_follow_a_umask_of_022(tmp_path):
    doc = {"schema": "golden-replay/report/1", "verdict": "error", "error": "x", "requests": []}
    files = {"report": tmp_path / "r.json", "junit": tmp_path / "j.xml", "html": tmp_path / "r.html"}
    with umask(0o022):
        write_reports(doc, **files)
    assert {name: oct(mode_of(p)) for name, p in files.items()} == \
        {name: "0o644" for name in files}


def test_a_stricter_umask_gives_a_stricter_mode(tmp_path):
    with umask(0o027):
        write_atomic(tmp_path / "r.json", "{}")
        assert current_umask() == 0o027
    assert mode_of(tmp_path / "r.json") == 0o640


def test_an_explicit_mode_is_kept(tmp_path):
    with umask(0o077):
        write_atomic(tmp_path / "repro.sh", "#!/bin/sh\n", mode=0o755)
    assert mode_of(tmp_path / "repro.sh") == 0o755
