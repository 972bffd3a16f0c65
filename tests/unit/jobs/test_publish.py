"""Publishing a report (replay/jobs/publish.py): the files first, then the history given as a
value; the environment is never read."""

from __future__ import annotations

import json

import pytest

from replay.history.database import HistoryError
from replay.history.store import HistoryStore
from replay.jobs.publish import ReportFiles, publish
from tests.support.history_reports import run_report
from tests.support.postgres import free_port


def test_the_history_named_gets_the_document_after_its_files(tmp_path):
    history = tmp_path / "h.sqlite"
    publish(run_report(), ReportFiles(report=tmp_path / "r.json"), history=str(history))
    with HistoryStore.open(str(history)) as store:
        assert len(store.list_runs()) == 1
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "pass"


def test_a_history_that_fails_leaves_the_files_written(tmp_path):
    with pytest.raises(HistoryError):
        publish(run_report(), ReportFiles(report=tmp_path / "r.json"),
                history=f"postgresql://ci:pw@127.0.0.1:{free_port()}/none")
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "pass"


def test_no_history_is_read_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GOLDEN_HISTORY", str(tmp_path / "h.sqlite"))
    publish(run_report(), ReportFiles(report=tmp_path / "r.json"))
    assert (tmp_path / "r.json").exists() and not (tmp_path / "h.sqlite").exists()
