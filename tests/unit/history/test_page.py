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


LONG_VERSION = "0.5.10-post1+cu128.build.20261101.a-long-version-name"
PROFILES = ("sglang-hicache-seed", "sglang-hicache-write-back", "sglang-hicache-layer-first")


def store_with_a_matrix(url: str) -> None:
    """Three matrix profiles replayed at the same times on four versions (one with a long
    name), with their client settings, then one shard and one merged run."""
    docs = []
    for h, version in enumerate(["0.5.9", "0.5.10", LONG_VERSION, "0.5.23"]):
        for k, profile in enumerate(PROFILES):
            doc = run_report(version=version, hour=3 * h,
                             failing=("g1/b0/t1",) if (h + k) % 3 == 0 else ())
            doc.update(server_target=f"launch:{profile}", run_id=f"r{h}{k}",
                       client={"concurrency": 4 * (k + 1), "schedule": "lockstep"})
            docs.append(doc)
    docs.append({**run_report(version="0.5.23", hour=20), "shard": "1/2", "run_id": "s1"})
    docs.append({**run_report(version="0.5.23", hour=21), "merged_from": [], "run_id": "m"})
    with HistoryStore.open(url) as store:
        store.add([r for d in docs for r in records(d)])


def test_each_plot_has_a_legend_for_its_colours(tmp_path):
    url = str(tmp_path / "h.sqlite")
    store_with_a_matrix(url)
    page = page_of(url)
    for kind in ("timeline", "rates", "coverage", "unstable"):
        assert f'<div class="legend {kind}-legend">' in page, kind
    legend = page.split('<div class="legend timeline-legend">', 1)[1].split("</div>", 1)[0]
    for verdict, colour in (("pass", "#2e7d32"), ("fail", "#c62828"), ("error", "#6d4c41")):
        assert colour in legend and f"run {verdict}" in legend
    assert "a shard&#x27;s run" in legend and "a merged run" in legend
    rates = page.split('<div class="legend rates-legend">', 1)[1].split("</div>", 1)[0]
    assert "#c62828" in rates and "fail rate" in rates and "#ef6c00" in rates and "flake rate" in rates


def test_three_matrix_runs_at_one_time_are_drawn_in_three_lanes(tmp_path):
    url = str(tmp_path / "h.sqlite")
    store_with_a_matrix(url)
    timeline = page_of(url).split('<svg class="plot timeline"', 1)[1].split("</svg>", 1)[0]
    names = re.findall(r'<text class="lane"[^>]*>[^<]*<title>([^<]+)</title>', timeline)
    lanes = {name: i for i, name in enumerate(names)}
    assert set(PROFILES) <= set(lanes)
    marks = re.findall(r'class="run" data-verdict="\w+" data-lane="(\d+)"[^>]*?(?:cx|d)="[^"]*"'
                       r'[^>]*><title>run \d+ 2026-09-01T00:00:00Z: [^<]*profile ([\w-]+)', timeline)
    assert sorted(marks) == sorted((str(lanes[p]), p) for p in PROFILES)


def test_each_run_says_its_profile_flags_client_settings_and_tags(tmp_path):
    url = str(tmp_path / "h.sqlite")
    store_with_a_matrix(url)
    page = page_of(url)
    assert "profile sglang-hicache-write-back, flags " in page
    assert "client concurrency 8, schedule lockstep" in page
    assert 'data-tags="shard 1/2"' in page and 'data-tags="merged"' in page
    latest = page.split('<section class="golden" id="latest">', 1)[1]
    assert "<span class=tag>shard 1/2</span>" in latest and "<span class=tag>merged</span>" in latest
    assert '<td class="client">concurrency 12, schedule lockstep</td>' in latest
