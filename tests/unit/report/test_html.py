"""The HTML report: what the page shows, that it escapes, that it never reaches the network.

Unit tests render the sample reports in tests/data/reports (made by replaying the protocol stub
with faults injected) and hand-made edge cases. The page in a real browser (Debian's chromium,
headless): tests/integration/test_browser.py.
"""

from __future__ import annotations

import copy
import json
import random
import re
from html.parser import HTMLParser
from importlib.resources import files
from typing import Any

import pytest
import typer

from cli.options import exits_cleanly
from typer.testing import CliRunner

from cli.report_cmd import report as report_command
from replay.report.html import render_html, write_html
from replay.report.html.histogram import cache_granularity
from replay.report.document import SCHEMA, report_dict
from tests.support import paths

DATA = paths.DATA / "reports"
SAMPLES = ("passing", "failing", "repeat", "matrix")


def sample(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.json").read_text())


def nodes(page: str) -> dict[str, str]:
    """Tree node id -> status, as drawn."""
    return dict(re.findall(r'<g class="node" data-id="([^"]+)" data-status="([^"]+)"', page))


class PageScan(HTMLParser):
    """Every tag and attribute, the ids, and the text of <style> and <script> elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ids: list[str] = []
        self.style_text: list[str] = []
        self.script_text: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if a.get("id"):
            self.ids.append(str(a["id"]))
        self._in = tag if tag in ("style", "script") else None

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self._in = None

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "style":
            self.style_text.append(data)
        elif self._in == "script":
            self.script_text.append(data)


def scan(page: str) -> PageScan:
    parser = PageScan()
    parser.feed(page)
    parser.close()
    return parser


URL_ATTRIBUTES = {"href", "xlink:href", "src", "srcset", "action", "formaction", "poster", "data",
                  "background", "ping", "manifest", "cite", "longdesc", "usemap", "codebase"}
FETCHING_TAGS = {"link", "img", "iframe", "frame", "object", "embed", "base", "audio", "video",
                 "source", "track", "image", "use", "feimage", "portal"}


def external_references(page: str) -> list[str]:
    """Everything in the page that could make a browser fetch something: tags that load, URL
    attributes other than same-page anchors, CSS url()/@import, a script src, a refresh."""
    found = []
    s = scan(page)
    for tag, attrs in s.tags:
        if tag in FETCHING_TAGS:
            found.append(f"<{tag}>")
        for name, value in attrs.items():
            if name in URL_ATTRIBUTES and not str(value or "").startswith("#"):
                found.append(f"<{tag} {name}={value!r}>")
            if name == "style" and re.search(r"url\(|@import", str(value), re.I):
                found.append(f"<{tag} style={value!r}>")
        if tag == "meta" and str(attrs.get("http-equiv", "")).lower() == "refresh":
            found.append("<meta refresh>")
    for css in s.style_text:
        found += [f"css {m}" for m in re.findall(r"url\([^)]*\)|@import[^;]*", css, re.I)]
    for js in s.script_text:
        found += [f"js {m}" for m in re.findall(r"\b(?:fetch|XMLHttpRequest|WebSocket|EventSource|"
                                                r"import\(|sendBeacon)\b", js)]
    return found


# ---------------------------------------------------------------------------------------------
# What the page shows


def test_failing_report_shows_the_verdict_and_every_failure():
    page = render_html(sample("failing"))
    assert 'data-verdict="fail"' in page and ">FAIL<" in page
    sections = re.findall(r'<section class="card req" id="([^"]+)" data-status="([^"]+)"', page)
    assert {status for _, status in sections} == {"logprob_drift", "token_divergence", "cache_miss"}
    assert len(sections) == 4
    assert "cached_tokens 16 &lt; 192 (mamba track interval 32)" in page


def test_tree_has_a_node_per_request_coloured_by_its_status():
    report = sample("failing")
    drawn = nodes(render_html(report))
    assert drawn == {r["id"]: r["status"] for r in report["requests"]}
    assert len(drawn) == 27


def test_tree_marks_the_first_divergence_and_the_cache_miss():
    page = render_html(sample("failing"))
    markers = set(re.findall(r'class="marker">([^<]+)<', page))
    assert markers == {"pos 21", "pos 40", "pos 37", "miss 16&lt;192"}


def test_tree_edges_carry_the_cached_length_and_tier_split():
    report = sample("failing")
    page = render_html(report)
    entry = next(r for r in report["requests"] if r["id"] == "g2/b0/t2")
    assert entry["cached_tokens_details"] == {"device": 112, "host": 64, "storage": 32}
    assert ">d112 h64 s32<" in page
    assert "cached 208: device 112, host 64, storage 32; expected at least 192" in page


def test_tree_of_ids_outside_the_g_b_t_scheme_still_draws_them():
    doc = {"schema": SCHEMA, "verdict": "pass", "requests": [
        {"id": "g0/b0/t0", "repeat": 0, "status": "identical", "passed": True},
        {"id": "g0/b0/t1", "repeat": 0, "status": "identical", "passed": True},
        {"id": "custom-7", "repeat": 0, "status": "error", "passed": False}]}
    assert nodes(render_html(doc)) == {"g0/b0/t0": "identical", "g0/b0/t1": "identical",
                                       "custom-7": "error"}


def test_fingerprints_are_side_by_side_and_differences_highlighted():
    page = render_html(sample("failing"))
    fp = page[page.index('id="r-fingerprints"'):page.index('id="r-histogram"')]
    for text in ("http://b200-ref.lab:30000", "http://h200-hicache.lab:30000",
                 "stub/hybrid-mamba-tiny", "hicache_write_policy", "write_through",
                 "mamba_track_interval", "disable_overlap_schedule", "golden-replay 0.1.0",
                 "3.11.7 \u00b7 Linux"):
        assert text in fp, text
    differing = re.findall(r'<tr class="differs"><td>([^<]+)</td>', fp)
    assert "enable_hierarchical_cache" in differing and "page_size" not in differing


def test_first_divergence_shows_tokens_values_and_marked_bits():
    page = render_html(sample("failing"))
    section = page[page.index('id="r-req-g2-b0-t2-r0"'):]
    section = section[:section.index("</section>")]
    assert "<mark>4000</mark>" in section  # the replay's token
    assert "0xbff687f<mark>7</mark><mark>0</mark>0000000" in section
    assert "-1.4081945419311523" in section and "-1.4081943035125732" in section
    assert "Top-k at position 37" in section and "replay token 2242 was golden rank 0" in section


def test_per_position_charts_for_each_diverged_request():
    page = render_html(sample("failing"))
    assert page.count('class="chart abs-delta"') == 3 and page.count('class="chart ulp"') == 3
    assert page.count('class="first-divergence"') == 6


def test_non_finite_values_are_drawn_and_labelled():
    doc = sample("failing")
    req = next(r for r in doc["requests"] if r["id"] == "g1/b2/t1")
    req["detail"]["abs_delta"][:4] = ["nan", "inf", "-inf", 0.0]
    req["detail"]["ulp"][:3] = ["inf", "inf", 0]
    req["first_divergence"].update(golden_logprob="-inf", replay_logprob="nan", ulp="inf")
    req["detail"]["top_k"]["replay"][0][1] = "nan"
    page = render_html(doc)
    labels = re.findall(r'<text class="nonfinite"[^>]*>([^<]+)</text>', page)
    assert {"nan", "inf", "-inf"} <= set(labels)
    assert "value differs (non-finite)" in page


def test_all_zero_or_all_non_finite_series_render():
    doc = {"schema": SCHEMA, "verdict": "fail", "requests": [
        {"id": "g0/b0/t0", "repeat": 0, "status": "logprob_drift", "passed": False,
         "first_divergence": None, "detail": {"abs_delta": [0.0, 0.0], "ulp": [0, 0], "top_k": None}},
        {"id": "g0/b1/t0", "repeat": 0, "status": "logprob_drift", "passed": False,
         "first_divergence": None, "detail": {"abs_delta": ["nan"], "ulp": ["inf"], "top_k": None}},
    ]}
    page = render_html(doc)
    assert page.count('class="chart ulp"') == 2


def test_histogram_marks_page_and_track_boundaries():
    report = sample("failing")
    page = render_html(report)
    hist = page[page.index('id="r-histogram"'):page.index('id="r-run"')]
    lengths = re.findall(r'<g class="bar" data-length="(\d+)">', hist)
    assert lengths == list(report["summary"]["cache_hit_lengths"])
    assert hist.count('class="track-boundary"') == 7  # 32 .. 224
    assert hist.count('class="page-boundary"') == 14  # 16 .. 224
    assert "boundaries: page 16, track 32" in hist


def test_boundaries_come_from_the_expectation_without_server_info():
    assert cache_granularity({"expect_cache": "attention(page=64)"}) == (64, None)
    assert cache_granularity({"expect_cache": "mamba:128"}) == (None, 128)
    assert cache_granularity({"expect_cache": "none"}) == (None, None)
    info = {"server_meta": {"server_info": {"page_size": 32, "mamba_track_interval": 256}}}
    assert cache_granularity({**info, "expect_cache": "attention(page=32)"}) == (32, None)
    assert cache_granularity({**info, "expect_cache": "mamba:128"}) == (32, 128)


def test_repeat_grid_shows_which_repeats_failed_where():
    page = render_html(sample("repeat"))
    grid = page[page.index('id="r-repeat-grid-table"'):]
    grid = grid[:grid.index("</table>")]
    failed = re.findall(r'<td class="fail[^"]*"[^>]*title="([^"]+)"', grid)
    assert [t.split(":")[0] for t in failed] == ["repeat 1 g0/b2/t1", "repeat 2 g0/b2/t1",
                                                 "repeat 2 g2/b1/t2"]
    assert grid.count("<tr><th class=\"row\">repeat ") == 3
    assert nodes(page)["g0/b2/t1"] == "logprob_drift" and ">g0/b2/t1  2/3<" in page


def test_no_repeat_grid_for_a_single_repeat():
    assert "repeat-grid" not in render_html(sample("failing"))


def test_matrix_grid_has_a_row_per_profile_and_a_section_each():
    doc = sample("matrix")
    page = render_html(doc)
    grid = page[page.index('id="matrix-grid-table"'):]
    grid = grid[:grid.index("</table>")]
    rows = re.findall(r'<tr><th class="row">([^<]+)</th>', grid)
    assert rows == ["device-only [pass]", "hicache-host [fail]", "hicache-storage [fail]",
                    "hicache-kernel-io [error]"]
    failed = [t.split(":")[0] for t in re.findall(r'<td class="fail[^"]*"[^>]*title="([^"]+)"', grid)]
    assert failed == ["hicache-host [fail] g1/b0/t2", "hicache-storage [fail] g0/b1/t1",
                      "hicache-storage [fail] g1/b1/t2"]
    for name in doc["matrix"]["profiles"]:
        assert f'id="p-{name.replace("-", "_2d_")}--profile"' in page
    assert 'data-verdict="error"' in page  # the worst profile's
    assert "<b>hicache-kernel-io:</b> server for profile hicache-kernel-io exited" in page
    assert "server-logs/hicache-storage.log" in page
    assert '<th class="row">hicache-kernel-io [error]</th>' in grid and ">did not run<" in grid


def test_matrix_verdicts_stand_in_for_a_report_without_one():
    doc = sample("matrix")
    del doc["matrix"]["reports"]["hicache-host"]["verdict"]
    page = render_html(doc)
    assert '<tr><th class="row">hicache-host [fail]</th>' in page


def test_matrix_alongside_the_usual_fields_renders_both():
    doc = sample("failing")
    doc["matrix"] = sample("matrix")["matrix"]
    page = render_html(doc)
    assert 'id="matrix-grid-table"' in page and 'id="r-req-g2-b0-t2-r0"' in page
    assert 'id="p-hicache_2d_host--req-g1-b0-t2-r0"' in page


def test_matrix_verdict_is_derived_when_missing():
    doc = {"schema": SCHEMA, "matrix": {"profiles": ["a", "b"], "reports": {
        "a": sample("passing"), "b": {"schema": SCHEMA, "verdict": "error", "error": "down"}}}}
    page = render_html(doc)
    assert 'data-verdict="error"' in page and "<b>b:</b> down" in page


@pytest.mark.parametrize("name", SAMPLES)
def test_ids_are_unique_and_every_link_has_a_target(name):
    s = scan(render_html(sample(name)))
    assert len(s.ids) == len(set(s.ids))
    targets = {str(a["href"])[1:] for _, a in s.tags if str(a.get("href", "")).startswith("#")}
    assert targets <= set(s.ids)
    assert bool(targets) == (name != "passing")  # every failure links to its details


def test_passing_report_has_no_failure_sections():
    page = render_html(sample("passing"))
    assert 'data-verdict="pass"' in page and ">PASS<" in page
    assert "<section" not in page and "None: every request passed." in page
    assert set(nodes(page).values()) == {"identical"}


def test_error_report_shows_its_reason():
    doc = report_dict(None, golden="g.zarr", server="http://x:1", policy="exact",
                      error="cannot connect to http://x:1")
    page = render_html(doc)
    assert 'data-verdict="error"' in page and "cannot connect to http://x:1" in page
    assert "<section" not in page


@pytest.mark.parametrize("doc", [
    {"schema": SCHEMA},
    {"schema": SCHEMA, "verdict": "pass", "summary": None, "requests": []},
    {"schema": SCHEMA, "verdict": "fail", "summary": {"cache_hit_lengths": {"x": 1, "5": "y"}},
     "requests": [{"id": 3, "repeat": "?", "passed": False, "detail": "junk",
                   "first_divergence": "junk"}]},
    {"schema": SCHEMA, "matrix": {}},
])
def test_sparse_or_odd_reports_still_render(doc):
    assert render_html(doc).startswith("<!DOCTYPE html>")


JUNK = (None, "x", -1, 0, [], {}, "nan", "-inf", 1e308, True, [[1]], {"a": 1}, 2**70, 10**400)


def json_paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every value (the first few items of each list)."""
    out = [prefix] if prefix else []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj[:4]) if isinstance(obj, list) \
        else ()
    for key, value in items:
        out += json_paths(value, (*prefix, key))
    return out


@pytest.mark.parametrize("name", ["failing", "matrix"])
def test_any_field_of_the_wrong_type_still_renders(name):
    """Reports come from other tools and older versions too: a field of the wrong type is shown
    as it is (or skipped), never a crash. Seeded, so that a failure reproduces."""
    rng = random.Random(20260812)
    doc = sample(name)
    paths = json_paths(doc)
    for _ in range(40):
        mutated = copy.deepcopy(doc)
        for path in rng.sample(paths, 3):
            target = mutated
            try:
                for key in path[:-1]:
                    target = target[key]
                target[path[-1]] = rng.choice(JUNK)
            except (KeyError, IndexError, TypeError):
                continue  # an earlier mutation replaced a parent
        assert render_html(mutated).endswith("</html>\n")


def test_a_replay_that_never_hit_the_cache_shows_why_it_failed():
    doc = copy.deepcopy(sample("failing"))
    doc["no_cache_hits"], doc["hit_problem"] = True, "no request was served from the cache"
    assert 'id="r-hit-problem"><b>cache hits:</b> no request was served from the cache' in render_html(doc)


def test_report_text_is_escaped():
    evil = '<script>alert("x")</script>"\'><img src=x onerror=alert(1)>'
    doc = copy.deepcopy(sample("failing"))
    doc["error"] = doc["golden"] = doc["server"] = doc["policy"] = doc["expect_cache"] = evil
    doc["tier_problem"] = doc["hit_problem"] = evil
    doc["golden_meta"]["server_info"]["hicache_" + evil] = evil
    doc["server_meta"]["model_info"]["model_path"] = evil
    doc["summary"]["cache_hit_lengths"] = {evil: 3, "64": 1}
    bad = doc["requests"][0]
    bad.update(id=evil, passed=False, status=evil, cache_problem=evil, first_divergence={
        "position": evil, "kind": evil, "golden_token": evil, "replay_token": 1,
        "golden_logprob": evil, "replay_logprob": 1.0, "golden_bits": evil, "replay_bits": evil,
        "ulp": evil}, detail={"abs_delta": [evil], "ulp": [evil], "top_k": {
            "position": evil, "golden": [[evil, evil]], "replay": [[1, evil]]}})
    doc["matrix"] = {"profiles": [evil], "reports": {evil: copy.deepcopy(doc)}}
    page = render_html(doc)
    assert "<script>alert" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    s = scan(page)
    assert len(s.script_text) == 1  # ours
    assert not [a for _, attrs in s.tags for a in attrs if a.startswith("on")]
    assert external_references(page) == []


@pytest.mark.parametrize("name", SAMPLES)
def test_page_references_nothing_outside_itself(name):
    page = render_html(sample(name))
    assert external_references(page) == []
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp and "default-src &#x27;none&#x27;" in csp[1]


def test_page_inlines_the_stylesheet_and_script_shipped_as_package_data():
    """report.css and report.js are package data; the page carries them whole, loads neither."""
    s = scan(render_html(sample("passing")))
    shipped = files("replay.report.html")
    assert s.style_text == ["\n" + shipped.joinpath("report.css").read_text(encoding="utf-8")]
    assert s.script_text == ["\n" + shipped.joinpath("report.js").read_text(encoding="utf-8")]


def test_external_reference_scan_is_not_blind():
    """The static scan above would notice each way a page can fetch."""
    page = ('<link rel="stylesheet" href="https://cdn.example/x.css"><img src="x.png">'
            '<svg><image href="http://e/i.png"/></svg><a href="http://e/">x</a>'
            '<style>@import "y.css"; b{background:url(http://e/b.png)}</style>'
            '<div style="background:url(z.png)"></div><script src="http://e/s.js"></script>'
            '<script>fetch("http://e/f")</script><meta http-equiv="refresh" content="0;url=http://e">')
    found = " ".join(external_references(page))
    for needle in ("<link>", "<img>", "<image>", "http://e/", "@import", "url(http://e/b.png)",
                   "url(z.png)", "s.js", "js fetch", "<meta refresh>"):
        assert needle in found, needle


def test_write_html_writes_utf8(tmp_path):
    out = tmp_path / "r.html"
    write_html(sample("failing"), out)
    assert out.read_text(encoding="utf-8") == render_html(sample("failing"))


# ---------------------------------------------------------------------------------------------
# The command


def cli_app() -> typer.Typer:
    """The command as cli/main.py registers it (a callback keeps `report` a subcommand)."""
    app = typer.Typer(add_completion=False)
    app.callback()(lambda: None)
    app.command("report")(exits_cleanly(report_command))
    return app


runner = CliRunner()


def test_command_writes_the_page(tmp_path):
    out = tmp_path / "report.html"
    res = runner.invoke(cli_app(), ["report", str(DATA / "failing.json"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_text() == render_html(sample("failing"))


@pytest.mark.parametrize("content, message", [
    ('{"schema": "something-else/1", "verdict": "pass"}', "does not start with"),
    ('{"verdict": "pass"}', "schema None"),
    ("[1, 2]", "not an object"),
    ("{not json", "not valid JSON"),
    (b"\xff\xfe\x00", "cannot read"),
])
def test_command_refuses_what_is_not_a_report(tmp_path, content, message):
    src = tmp_path / "in.json"
    if isinstance(content, bytes):
        src.write_bytes(content)
    else:
        src.write_text(content)
    out = tmp_path / "report.html"
    res = runner.invoke(cli_app(), ["report", str(src), "--out", str(out)])
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert not out.exists()


def test_command_refuses_a_missing_file(tmp_path):
    res = runner.invoke(cli_app(), ["report", str(tmp_path / "nope.json"), "-o",
                                    str(tmp_path / "r.html")])
    assert res.exit_code == 2 and "cannot read" in res.output


def test_command_reports_an_unwritable_output(tmp_path):
    res = runner.invoke(cli_app(), ["report", str(DATA / "passing.json"), "-o",
                                    str(tmp_path / "no-such-dir" / "r.html")])
    assert res.exit_code == 2 and "cannot write" in res.output
