"""The HTML report and the history page in a real browser (headless Chromium, offline): their
scripts run to the end and they load nothing; and the check itself sees every kind of load."""

from __future__ import annotations

import html as html_module
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from replay.history.commands import write_page
from replay.report.html import render_html, write_html
from tests.support.postgres import history_url, postgres  # noqa: F401 - fixtures
from tests.unit.history.test_page import LONG_VERSION, store_with_a_matrix, store_with_runs
from tests.unit.report.test_html import sample


CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync",
                  "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0")


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium): the real-browser "
                    "checks of the HTML report did not run")
    return path


@dataclass
class Visit:
    dom: str  # after the page's scripts ran
    requests: list[str]  # URLs the network stack was asked for on the page's behalf
    console: list[str]  # console messages, among them every load a CSP refused


def browse(chromium: str, page: Path, work: Path) -> Visit:
    """Load the page headless and offline (every host name resolves to nothing)."""
    netlog = work / "netlog.json"
    cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={work / 'profile'}",
           f"--log-net-log={netlog}", "--dump-dom", page.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return Visit(proc.stdout, page_requests(json.loads(netlog.read_text())), console)


def page_requests(netlog: dict[str, Any]) -> list[str]:
    """URL requests started on behalf of the page, from Chromium's network log. Chromium's own
    housekeeping (update checks, time sync) has no initiator ("not an origin") and no file://
    isolation key; anything else, whatever its shape, counts against the page."""
    start = netlog["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in netlog["events"]:
        params = event.get("params") or {}
        if event.get("type") != start or "url" not in params:
            continue
        housekeeping = (params.get("initiator") == "not an origin"
                        and "file://" not in str(params.get("network_isolation_key", "")))
        if not housekeeping:
            urls.append(str(params["url"]))
    return urls


def attempted(visit: Visit) -> str:
    """Every load the page attempted: sent to the network, or refused by its CSP."""
    refused = [line for line in visit.console if "Content Security Policy" in line]
    return "\n".join(visit.requests + refused)


def test_browser_runs_the_page_and_it_loads_nothing(chromium, tmp_path):
    """A failing report with a matrix alongside: every part of the page, in one browser run."""
    doc = sample("failing")
    doc["matrix"] = sample("matrix")["matrix"]
    page = tmp_path / "report.html"
    write_html(doc, page)
    visit = browse(chromium, page, tmp_path)
    assert visit.requests == [] and visit.console == []  # no load, no CSP report, no JS error
    dom = visit.dom
    assert 'data-js="ready"' in dom  # the inline script ran to its end
    assert 'id="keys-hint" hidden' not in dom  # and revealed the keyboard hint
    toggle = re.search(r'<label( hidden)?><input type="checkbox" class="only-failing-toggle"', dom)
    assert toggle and toggle[1] is None  # and the grid's 'only failing' switch
    assert len(re.findall(r'<section class="card req" id="r-', dom)) == 4
    assert dom.count('<svg class="tree"') == 4 and dom.count('<svg class="hist"') == 4
    assert dom.count('class="chart ulp"') == 3 + 2
    assert 'id="matrix-grid-table"' in dom and 'data-verdict="fail"' in dom


LEAKS = ("s.css", "s.js", "i.png", "v.png", "f.woff2", "fetched")


@pytest.mark.parametrize("with_csp", [False, True], ids=["no-csp", "report-csp"])
def test_browser_check_sees_every_kind_of_load(chromium, tmp_path, with_csp):
    """The checks above are only worth something if they see each way a page can fetch: in the
    network log without a CSP, as a CSP report with the report's own policy."""
    csp = re.search(r'<meta http-equiv="Content-Security-Policy"[^>]*>', render_html({}))
    assert csp
    leaky = tmp_path / "leaky.html"
    leaky.write_text(
        f'<!DOCTYPE html><html><head>{csp[0] if with_csp else ""}'
        '<link rel="stylesheet" href="https://leak.invalid/s.css">'
        "<style>@font-face{font-family:F;src:url(http://leak.invalid/f.woff2)}"
        'body{font-family:F}</style><script src="http://leak.invalid/s.js"></script></head>'
        '<body>x<img src="http://leak.invalid/i.png"><svg><image href="http://leak.invalid/v.png"'
        ' width="9" height="9"/></svg><script>fetch("http://leak.invalid/fetched").catch(()=>0);'
        "</script></body></html>")
    visit = browse(chromium, leaky, tmp_path)
    seen = attempted(visit)
    for name in LEAKS:
        assert f"leak.invalid/{name}" in seen, (name, seen)
    assert bool(visit.requests) != with_csp


def test_browser_renders_the_page_and_it_loads_nothing(chromium, history_url, tmp_path):
    store_with_runs(history_url)
    out = write_page(history_url, tmp_path / "page")
    visit = browse(chromium, out, tmp_path)
    assert visit.requests == [] and visit.console == []  # no load, no CSP report, no JS error
    assert 'data-js="ready"' in visit.dom
    drawn = re.search(r'data-plots-drawn="(\d+)"', visit.dom)
    assert drawn and int(drawn[1]) == 7  # every plot laid out with a size


LAYOUT_CHECK = """<script>
(function(){var problems=[];
document.querySelectorAll('svg.plot').forEach(function(svg){
  var box=svg.getBoundingClientRect();
  var texts=Array.prototype.slice.call(svg.querySelectorAll('text'));
  var rects=texts.map(function(t){return t.getBoundingClientRect();});
  rects.forEach(function(r,i){
    if(r.width===0){problems.push('empty '+texts[i].textContent);}
    if(r.left<box.left-0.5||r.right>box.right+0.5||r.top<box.top-0.5||r.bottom>box.bottom+0.5){
      problems.push('clipped: '+texts[i].textContent);}
    for(var j=0;j<i;j++){var o=rects[j];
      var w=Math.min(r.right,o.right)-Math.max(r.left,o.left);
      var h=Math.min(r.bottom,o.bottom)-Math.max(r.top,o.top);
      if(w>0.5&&h>0.5){problems.push('overlap: '+texts[i].textContent+' / '+texts[j].textContent);}}
  });});
document.body.setAttribute('data-layout-problems',JSON.stringify(problems));})();
</script></body>"""


def test_browser_draws_every_label_whole_inside_its_plot_and_apart(chromium, tmp_path):
    """Long version names, three lanes, shards and merges: no label is cut off by its plot's
    edge or drawn over another (as laid out by real Chromium), and the page loads nothing."""
    url = str(tmp_path / "h.sqlite")
    store_with_a_matrix(url)
    page = write_page(url, tmp_path / "site")
    checked = tmp_path / "checked.html"
    checked.write_text(page.read_text().replace("</body>", LAYOUT_CHECK, 1))
    visit = browse(chromium, checked, tmp_path)
    assert visit.requests == [] and visit.console == []
    found = re.search(r'data-layout-problems="([^"]*)"', visit.dom)
    assert found, visit.dom[:500]
    assert json.loads(html_module.unescape(found[1])) == []
    assert LONG_VERSION in visit.dom  # whole in its tooltip, cut with an ellipsis where drawn
