"""The history page: its four plots per golden, that every report text is escaped, that it
loads nothing; and in real Chromium (headless, offline) that it renders and fetches nothing."""

from __future__ import annotations

import re

from replay.history.ingest import records
from replay.history.page import render_page
from replay.history.queries import golden_history, goldens, run_summary
from replay.history.store import HistoryStore
from tests.support.history_reports import run_report
from tests.unit.report.test_html import external_references

EVIL = '<script>alert(1)</script>"><img src=x>'


def store_with_runs(url: str) -> None:
    with HistoryStore.open(url) as store:
        store.add([r for d in (run_report(version="0.5.9", hour=0),
                               run_report(version="0.5.10", hour=1, failing=("g1/b0/t1",)),
                               run_report(version="0.5.10", hour=2),
                               run_report(version=EVIL, hour=3, failing=("g1/b0/t1", "g2/b0/t2")),
                               run_report(hour=4, golden_sha256="b" * 64))
                   for r in records(d)])


def page_of(url: str) -> str:
    with HistoryStore.open(url) as store:
        histories = [golden_history(store, s) for s in goldens(store)]
        return render_page(histories, [run_summary(r) for r in store.list_runs()], store.where)


def test_each_golden_has_its_four_plots(tmp_path):
    url = str(tmp_path / "h.sqlite")
    store_with_runs(url)
    page = page_of(url)
    assert len(re.findall(r'<section class="golden" id="golden-\d+"', page)) == 2
    for kind in ("timeline", "rates", "coverage", "unstable"):
        assert page.count(f'<svg class="plot {kind}"') == 1 + (kind != "unstable"), kind
    assert len(re.findall(r'<circle class="run" data-verdict="fail"', page)) == 2
    bars = dict(re.findall(r'<rect class="fail-rate" data-version="([^"]+)" data-rate="([^"]+)"', page))
    assert bars["0.5.9"] == "0.0" and bars["0.5.10"] == "0.5"
    unstable = re.findall(r'<rect class="unstable" data-id="([^"]+)" data-flips="(\d+)"', page)
    assert unstable[0] == ("g1/b0/t1", "3")
    assert "first fails on 0.5.10, after 0.5.9 passed" in page


def test_every_text_from_a_report_is_escaped(tmp_path):
    url = str(tmp_path / "h.sqlite")
    store_with_runs(url)
    page = page_of(url)
    assert EVIL not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert len(re.findall(r"<script>", page)) == 1  # the page's own


def test_the_page_references_nothing_outside_itself(tmp_path):
    url = str(tmp_path / "h.sqlite")
    store_with_runs(url)
    assert external_references(page_of(url)) == []


def test_an_empty_history_still_makes_a_page(tmp_path):
    page = render_page([], [], "h.sqlite")
    assert "holds no run yet" in page and external_references(page) == []


def test_a_long_timeline_draws_only_its_latest_runs(tmp_path, monkeypatch):
    from replay.history import page

    monkeypatch.setattr(page, "MAX_TIMELINE_RUNS", 3)
    url = str(tmp_path / "h.sqlite")
    store_with_runs(url)
    html = page_of(url)
    assert html.count('<circle class="run"') == 3 + 1  # golden a: 3 of its 4; golden b: 1
    assert "The latest 3 of 4 runs are drawn." in html
