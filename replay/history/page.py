"""`golden history page`: one self-contained HTML page over the history (inline CSS, inline SVG,
a few lines of inline script; a Content-Security-Policy forbids every load).

Per golden, four plots: its verdicts over time (bands per server version), fail and flake rates
per server version, the cache-hit lengths covered per version, the most unstable requests. Every
piece of text from a report goes through `esc` (reports come from servers).
"""

from __future__ import annotations

import html
from datetime import datetime
from typing import Any

from replay.history.queries import iso
from replay.history.store import now_utc

VERDICT_COLOURS = {"pass": "#2e7d32", "fail": "#c62828", "error": "#6d4c41"}
WIDTH = 900
MAX_LENGTH_COLUMNS = 48
MAX_UNSTABLE = 15
MAX_TIMELINE_RUNS = 2000  # the latest this many runs are drawn (the page stays light)
CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
       "base-uri 'none'; form-action 'none'")
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:0 0 6px} h3{font-size:14px;margin:14px 0 4px}
section.golden{background:#fff;border:1px solid #ddd;border-radius:6px;padding:14px 18px;margin:18px 0}
.muted{color:#666} .note{margin:4px 0 8px} svg.plot{display:block;max-width:100%;height:auto}
svg text{font:11px system-ui,sans-serif;fill:#333} .empty{color:#888;font-style:italic}
table{border-collapse:collapse;font-size:12px} td,th{border-bottom:1px solid #eee;padding:2px 8px;text-align:left}
.v-pass{color:#2e7d32;font-weight:600} .v-fail{color:#c62828;font-weight:600} .v-error{color:#6d4c41;font-weight:600}
"""
SCRIPT = """
(function(){var drawn=0;document.querySelectorAll('svg.plot').forEach(function(s){
var b=s.getBoundingClientRect();if(b.width>0&&b.height>0){drawn++;}});
document.body.setAttribute('data-plots-drawn',String(drawn));
document.body.setAttribute('data-js','ready');})();
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def render_page(histories: list[dict[str, Any]], runs: list[dict[str, Any]], where: str) -> str:
    """The page for these golden histories (queries.golden_history) and the latest runs."""
    body = [f"<h1>golden-replay results history</h1><p class=\"muted\">{esc(where)} &middot; "
            f"{len(histories)} golden(s) &middot; made {esc(iso(now_utc()))}</p>"]
    if not histories:
        body.append('<p class="empty">The history holds no run yet.</p>')
    for i, h in enumerate(histories):
        body.append(golden_section(h, i))
    body.append(latest_runs(runs))
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{esc(CSP)}\">\n"
            "<meta name=\"referrer\" content=\"no-referrer\">\n"
            f"<title>golden-replay history</title>\n<style>{STYLE}</style>\n</head>\n"
            f"<body data-js=\"off\">\n{''.join(body)}\n<script>{SCRIPT}</script>\n</body>\n</html>\n")


def golden_section(h: dict[str, Any], index: int) -> str:
    counts = ", ".join(f"{n} {v}" for v, n in sorted(h["verdicts"].items()))
    keys = ", ".join(k.split(":")[-1][:12] for k in h["golden_keys"])
    drawn = h["timeline"][-MAX_TIMELINE_RUNS:]
    cut = (f'<p class="muted">The latest {len(drawn)} of {h["runs"]} runs are drawn.</p>'
           if len(drawn) < h["runs"] else "")
    return (f'<section class="golden" id="golden-{index}" data-runs="{h["runs"]}">'
            f"<h2>{esc(', '.join(h['names']))}</h2>"
            f'<p class="muted">golden {esc(keys)} &middot; {h["runs"]} run(s): {esc(counts)}</p>'
            f'<p class="note bisect">{esc(h["bisect"]["note"])}</p>'
            f"<h3>Verdicts over time</h3>{timeline_plot(drawn)}{cut}"
            f"<h3>Fail and flake rates per server version</h3>{rates_plot(h['versions'])}"
            f"<h3>Cache-hit lengths covered per server version</h3>{coverage_plot(h['coverage'])}"
            f"<h3>Most unstable requests</h3>{unstable_plot(h['requests'])}</section>")


def _svg(kind: str, height: int, parts: list[str], label: str) -> str:
    return (f'<svg class="plot {kind}" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'aria-label="{esc(label)}" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
            f'height="{height}">{"".join(parts)}</svg>')


def _time(text: str) -> float:
    return datetime.fromisoformat(text.rstrip("Z")).timestamp()


def timeline_plot(timeline: list[dict[str, Any]]) -> str:
    """A dot per run at its time, coloured by verdict, over bands of server versions."""
    left, right, top, bottom = 40, WIDTH - 20, 28, 90
    times = [_time(r["at"]) for r in timeline]
    lo, hi = min(times), max(times)
    span = (hi - lo) or 1.0

    def x(t: float) -> float:
        return left + (right - left) * ((t - lo) / span if hi > lo else 0.5)

    parts, bands = [], []
    for r, t in zip(timeline, times):  # consecutive runs of one version make a band
        if bands and bands[-1][0] == r["server_version"]:
            bands[-1][2] = t
        else:
            bands.append([r["server_version"], t, t])
    for i, (version, start, end) in enumerate(bands):
        x0, x1 = x(start) - 4, x(end) + 4
        parts.append(f'<rect class="band" x="{x0:.1f}" y="{top - 4}" width="{max(x1 - x0, 8):.1f}" '
                     f'height="{bottom - top + 8}" fill="{"#eef2f7" if i % 2 else "#f6f1e8"}">'
                     f"<title>server {esc(version)}</title></rect>")
        parts.append(f'<text x="{x0:.1f}" y="{top - 10}">{esc(version[:24])}</text>')
    for r, t in zip(timeline, times):
        y = {"pass": top + 12, "fail": top + 32, "error": top + 52}.get(r["verdict"], top + 52)
        parts.append(f'<circle class="run" data-verdict="{esc(r["verdict"])}" cx="{x(t):.1f}" '
                     f'cy="{y}" r="4" fill="{VERDICT_COLOURS.get(r["verdict"], "#555")}">'
                     f"<title>run {r['run']} {esc(r['at'])}: {esc(r['verdict'])} on "
                     f"{esc(r['server_version'])} ({r['requests_failed']} of {r['requests']} "
                     f"request(s) failed)</title></circle>")
    for name, y in (("pass", top + 12), ("fail", top + 32), ("error", top + 52)):
        parts.append(f'<text x="2" y="{y + 4}">{name}</text>')
    parts.append(f'<text x="{left}" y="{bottom + 18}">{esc(timeline[0]["at"])}</text>'
                 f'<text x="{right}" y="{bottom + 18}" text-anchor="end">{esc(timeline[-1]["at"])}</text>')
    return _svg("timeline", bottom + 26, parts, f"{len(timeline)} runs over time")


def rates_plot(versions: list[dict[str, Any]]) -> str:
    """Per version: a bar of its fail rate (red) and one of its flake rate (orange)."""
    left, top, height = 40, 16, 100
    step = (WIDTH - left - 10) / max(len(versions), 1)
    bar = min(step / 3, 40)
    parts = [f'<line x1="{left}" y1="{top + height}" x2="{WIDTH - 10}" y2="{top + height}" stroke="#999"/>',
             f'<text x="2" y="{top + 4}">100%</text><text x="2" y="{top + height}">0%</text>']
    for i, v in enumerate(versions):
        x0 = left + i * step + step / 2 - bar
        for j, (key, colour, what) in enumerate((("fail_rate", "#c62828", "runs failed"),
                                                 ("flake_rate", "#ef6c00", "requests flaky"))):
            rate = v[key] or 0.0
            h = max(height * rate, 1.0)
            parts.append(f'<rect class="{key.replace("_", "-")}" data-version="{esc(v["version"])}" '
                         f'data-rate="{rate}" x="{x0 + j * bar:.1f}" y="{top + height - h:.1f}" '
                         f'width="{bar - 2:.1f}" height="{h:.1f}" fill="{colour}">'
                         f"<title>{esc(v['version'])}: {rate:.0%} {what} ({v['fail']} of "
                         f"{v['pass'] + v['fail']} runs failed, {v['flaky_requests']} flaky "
                         f"request(s), {v['error']} error run(s))</title></rect>")
        parts.append(f'<text x="{left + i * step + step / 2:.1f}" y="{top + height + 14}" '
                     f'text-anchor="middle">{esc(v["version"][:18])}</text>')
    return _svg("rates", top + height + 22, parts, "fail and flake rates per server version")


def coverage_plot(cov: dict[str, Any]) -> str:
    """A grid: one row per server version, one column per hit length, darker = more requests."""
    lengths = [int(k) for k in cov["hit_lengths"]]
    if not lengths:
        return '<p class="empty">No request of a judged run reported a cache-hit length.</p>'
    shown = sorted(lengths)[:MAX_LENGTH_COLUMNS]
    versions = list(cov["by_version"])
    left, top, row = 120, 30, 18
    cell = (WIDTH - left - 10) / len(shown)
    peak = max(n for v in versions for n in cov["by_version"][v]["hit_lengths"].values())
    parts = []
    for j, length in enumerate(shown):
        if len(shown) <= 24 or j % max(1, len(shown) // 24) == 0:
            parts.append(f'<text x="{left + j * cell + cell / 2:.1f}" y="{top - 8}" '
                         f'text-anchor="middle">{length}</text>')
    for i, version in enumerate(versions):
        seen = cov["by_version"][version]["hit_lengths"]
        tiers = ", ".join(f"{t} {n}" for t, n in cov["by_version"][version]["tiers"].items())
        y = top + i * row
        parts.append(f'<text x="2" y="{y + row - 5}">{esc(version[:18])}<title>tiers: '
                     f"{esc(tiers or 'none reported')}</title></text>")
        for j, length in enumerate(shown):
            n = seen.get(str(length), 0)
            shade = 0.12 + 0.88 * n / peak if n else 0.0
            parts.append(f'<rect class="cell" data-version="{esc(version)}" data-length="{length}" '
                         f'data-count="{n}" x="{left + j * cell:.1f}" y="{y}" width="{max(cell - 1, 1):.1f}" '
                         f'height="{row - 2}" fill="#1565c0" fill-opacity="{shade:.2f}" stroke="#ddd">'
                         f"<title>{esc(version)}: hit length {length}: {n} request(s)</title></rect>")
    more = len(lengths) - len(shown)
    note = f'<p class="muted">{more} longer hit length(s) not drawn.</p>' if more > 0 else ""
    tiers = ", ".join(f"{t}: {n} tokens" for t, n in cov["tiers"].items()) or "none reported"
    return (_svg("coverage", top + len(versions) * row + 6, parts, "hit-length coverage")
            + note + f'<p class="muted tiers">Tiers: {esc(tiers)}</p>')


def unstable_plot(requests: list[dict[str, Any]]) -> str:
    """The requests that flip or fail most: a bar of their fail rate, their flips."""
    shaky = [r for r in requests if r["failed"]][:MAX_UNSTABLE]
    if not shaky:
        return '<p class="empty">No request failed in any judged run.</p>'
    left, row = 190, 20
    span = WIDTH - left - 160
    parts = []
    for i, r in enumerate(shaky):
        y = i * row + 4
        w = max(span * r["fail_rate"], 1.0)
        parts.append(f'<text x="2" y="{y + 13}">{esc(r["id"][:28])}</text>'
                     f'<rect class="unstable" data-id="{esc(r["id"])}" data-flips="{r["flips"]}" '
                     f'x="{left}" y="{y}" width="{w:.1f}" height="{row - 5}" '
                     f'fill="{"#ef6c00" if r["flaky"] else "#c62828"}"><title>{esc(r["id"])}: failed '
                     f"{r['failed']} of {r['observed']}, {r['flips']} flip(s)"
                     f"{', flaky' if r['flaky'] else ''}</title></rect>"
                     f'<text x="{left + w + 6:.1f}" y="{y + 13}">{r["fail_rate"]:.0%} failed, '
                     f"{r['flips']} flip(s){' · flaky' if r['flaky'] else ''}</text>")
    return _svg("unstable", len(shaky) * row + 8, parts, "most unstable requests")


def latest_runs(runs: list[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{esc(r['at'])}</td><td>{esc(r['golden'])}</td>"
        f"<td class=\"v-{esc(r['verdict'])}\">{esc(r['verdict'])}</td>"
        f"<td>{esc(r['server_version'])}</td><td>{esc(r['server'])}</td>"
        f"<td>{r['requests_failed']}/{r['requests']}</td></tr>" for r in runs)
    return ('<section class="golden" id="latest"><h2>Latest runs</h2><table><tr><th>time</th>'
            "<th>golden</th><th>verdict</th><th>server version</th><th>server</th>"
            f"<th>failed</th></tr>{rows}</table></section>")
