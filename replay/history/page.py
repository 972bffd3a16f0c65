"""`golden history page`: one self-contained HTML page over the history (inline CSS, inline SVG,
a few lines of inline script; a Content-Security-Policy forbids every load).

Per golden, four plots: its verdicts over time, one lane per server setup (the launch profile,
else the flags key), on bands of server versions; fail and flake rates per server version; the
cache-hit lengths covered per version; the most unstable requests. Each plot has a legend for
its colours and marks; every label is laid out to fit (long ones are cut with an ellipsis, the
whole text in its tooltip), so none is clipped or drawn over another. Each run says its profile,
flags, client settings (concurrency, schedule) and whether it was a shard or a merge. Every
piece of text from a report goes through `esc` (reports come from servers); the location is
shown without its secrets (the store's `where`).
"""

from __future__ import annotations

import html
from datetime import datetime
from typing import Any

from replay.history.queries import iso
from replay.history.store import now_utc

VERDICT_COLOURS = {"pass": "#2e7d32", "fail": "#c62828", "error": "#6d4c41"}
RATE_COLOURS = {"fail_rate": ("#c62828", "fail rate (failing runs / judged runs)"),
                "flake_rate": ("#ef6c00", "flake rate (flaky requests / requests)")}
WIDTH = 900
CHAR = 6.6  # px per character of the 11px plot font, a little over its average (fits, never clips)
MAX_LENGTH_COLUMNS = 48
MAX_UNSTABLE = 15
MAX_TIMELINE_RUNS = 2000  # the latest this many runs are drawn (the page stays light)
MAX_LANES = 12  # setups drawn as lanes; runs of further setups share the last lane
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
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:2px 0 6px;color:#444}
.legend span{display:inline-flex;align-items:center;gap:4px}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px}
.tag{display:inline-block;font-size:11px;padding:0 5px;border-radius:8px;background:#e8eaf6;color:#283593;margin-right:3px}
"""
SCRIPT = """
(function(){var drawn=0;document.querySelectorAll('svg.plot').forEach(function(s){
var b=s.getBoundingClientRect();if(b.width>0&&b.height>0){drawn++;}});
document.body.setAttribute('data-plots-drawn',String(drawn));
document.body.setAttribute('data-js','ready');})();
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fit(text: Any, width: float) -> str:
    """`text` cut (with an ellipsis) to what `width` px hold, escaped."""
    text, room = str(text), max(int(width // CHAR), 2)
    return esc(text if len(text) <= room else text[:room - 1] + "\u2026")


def label(x: float, y: float, text: Any, width: float, anchor: str = "start",
          cls: str = "label", extra: str = "") -> str:
    """A plot label that fits `width`: the whole text in its tooltip when cut."""
    return (f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>'
            f"{fit(text, width)}<title>{esc(text)}</title></text>")


def stacked(spans: list[tuple[float, float]]) -> list[int]:
    """For labels (x where each starts, its width), the row each goes in so that none touches
    another: the first row with room, else a new one."""
    ends: list[float] = []
    rows = []
    for start, width in spans:
        row = next((j for j, end in enumerate(ends) if end <= start), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = start + width + 6
        rows.append(row)
    return rows


def legend(items: list[tuple[str, str]], cls: str) -> str:
    """A legend: (swatch HTML, what it means) per entry."""
    return (f'<div class="legend {cls}">'
            + "".join(f"<span>{swatch}{esc(what)}</span>" for swatch, what in items) + "</div>")


def swatch(colour: str, shape: str = "square") -> str:
    radius = {"square": "2px", "dot": "50%", "ring": "50%"}[shape]
    fill = "transparent" if shape == "ring" else colour
    return (f'<i class="sw" style="background:{fill};border:2px solid {colour};'
            f'border-radius:{radius}"></i>')


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
            f"<h3>Verdicts over time, one lane per server setup</h3>{timeline_plot(drawn)}{cut}"
            f"<h3>Fail and flake rates per server version</h3>{rates_plot(h['versions'])}"
            f"<h3>Cache-hit lengths covered per server version</h3>{coverage_plot(h['coverage'])}"
            f"<h3>Most unstable requests</h3>{unstable_plot(h['requests'])}</section>")


def _svg(kind: str, height: float, parts: list[str], label_text: str) -> str:
    return (f'<svg class="plot {kind}" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'aria-label="{esc(label_text)}" viewBox="0 0 {WIDTH} {height:.0f}" width="{WIDTH}" '
            f'height="{height:.0f}">{"".join(parts)}</svg>')


def _time(text: str) -> float:
    return (datetime.fromisoformat(text.rstrip("Z")) - datetime(1970, 1, 1)).total_seconds()


def setup_of(run: dict[str, Any]) -> str:
    """The lane a run is drawn in: its launch profile, else its flags key."""
    return str(run["profile"]) if run.get("profile") else f"flags {run['flags']}"


def client_text(run: dict[str, Any]) -> str:
    client = run.get("client") or {}
    parts = [f"concurrency {client['concurrency']}" if client.get("concurrency") else "",
             f"schedule {client['schedule']}" if client.get("schedule") else ""]
    return ", ".join(p for p in parts if p) or "-"


def tags(run: dict[str, Any]) -> list[str]:
    return ([f"shard {run['shard']}"] if run.get("shard") else []) + (
        ["merged"] if run.get("merged") else [])


def run_title(r: dict[str, Any]) -> str:
    setup = f"profile {r['profile']}, " if r.get("profile") else ""
    return esc(f"run {r['run']} {r['at']}: {r['verdict']} on {r['server_version']}, {setup}"
               f"flags {r['flags']}, client {client_text(r)}"
               + "".join(f", {t}" for t in tags(r))
               + f" ({r['requests_failed']} of {r['requests']} request(s) failed)")


def timeline_plot(timeline: list[dict[str, Any]]) -> str:
    """A mark per run at its time, in its setup's lane, coloured by verdict (a ring: a shard's
    run; a diamond: a merge), over bands of server versions named in rows below."""
    lanes = list(dict.fromkeys(setup_of(r) for r in timeline))
    if len(lanes) > MAX_LANES:  # the rest share one lane
        lanes = lanes[:MAX_LANES - 1] + [f"{len(lanes) - MAX_LANES + 1} other setups"]
    left, right, top, row = 190, WIDTH - 16, 8, 22
    bottom = top + row * len(lanes)
    times = [_time(r["at"]) for r in timeline]
    lo, hi = min(times), max(times)
    span = (hi - lo) or 1.0

    def x(t: float) -> float:
        return left + (right - left) * ((t - lo) / span if hi > lo else 0.5)

    bands: list[list[Any]] = []
    for r, t in zip(timeline, times):  # consecutive runs of one version make a band
        if bands and bands[-1][0] == r["server_version"]:
            bands[-1][2] = t
        else:
            bands.append([r["server_version"], t, t])
    parts, names = [], []
    for i, (version, start, end) in enumerate(bands):
        x0, x1 = max(x(start) - 6, left - 6), min(x(end) + 6, right + 6)
        parts.append(f'<rect class="band" x="{x0:.1f}" y="{top}" width="{max(x1 - x0, 8):.1f}" '
                     f'height="{bottom - top}" fill="{"#eef2f7" if i % 2 else "#f6f1e8"}">'
                     f"<title>server {esc(version)}</title></rect>")
        width = min(len(str(version)) * CHAR + 4, 150.0)
        names.append((min(x0, WIDTH - width - 2), width, version, x0))
    for j, name in enumerate(lanes):
        y = top + j * row + row / 2
        parts.append(f'<line x1="{left - 6}" y1="{y:.1f}" x2="{right + 6}" y2="{y:.1f}" '
                     'stroke="#ddd"/>' + label(4, y + 4, name, left - 14, cls="lane"))
    for r, t in zip(timeline, times):
        lane = lanes.index(setup_of(r)) if setup_of(r) in lanes[:-1] else len(lanes) - 1
        cx, cy = x(t), top + lane * row + row / 2
        colour = VERDICT_COLOURS.get(r["verdict"], "#555")
        attrs = (f'class="run" data-verdict="{esc(r["verdict"])}" data-lane="{lane}" '
                 f'data-tags="{esc(" ".join(tags(r)))}"')
        if r.get("merged"):
            mark = (f'<path {attrs} d="M{cx:.1f} {cy - 6:.1f}L{cx + 6:.1f} {cy:.1f}L{cx:.1f} '
                    f'{cy + 6:.1f}L{cx - 6:.1f} {cy:.1f}Z" fill="{colour}">')
            close = "</path>"
        elif r.get("shard"):
            mark = (f'<circle {attrs} cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="#fff" '
                    f'stroke="{colour}" stroke-width="2">')
            close = "</circle>"
        else:
            mark = f'<circle {attrs} cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{colour}">'
            close = "</circle>"
        parts.append(f"{mark}<title>{run_title(r)}</title>{close}")
    axis = bottom + 14
    parts.append(label(left, axis, timeline[0]["at"], 170, cls="time")
                 + label(right, axis, timeline[-1]["at"], 170, anchor="end", cls="time"))
    names_top = axis + 8
    rows = stacked([(at, width) for at, width, _, _ in names])
    for (at, width, version, x0), slot in zip(names, rows):
        y = names_top + 14 * slot + 10
        parts.append(f'<line x1="{x0 + 6:.1f}" y1="{bottom}" x2="{x0 + 6:.1f}" y2="{y - 9:.1f}" '
                     'stroke="#bbb" stroke-dasharray="2,2"/>'
                     + label(at, y, version, width, cls="version"))
    height = names_top + 14 * (max(rows, default=0) + 1) + 6
    marks = [(swatch(c, "dot"), f"run {v}") for v, c in VERDICT_COLOURS.items()]
    marks += [(swatch("#555", "ring"), "a shard's run"), ("\u25c6", "a merged run"),
              (swatch("#eef2f7"), "bands: one server version")]
    return (legend(marks, "timeline-legend")
            + _svg("timeline", height, parts, f"{len(timeline)} runs over time"))


def rates_plot(versions: list[dict[str, Any]]) -> str:
    """Per version: a bar of its fail rate and one of its flake rate; the version names below,
    in as many rows as they need not to touch."""
    left, top, height = 44, 16, 100
    step = (WIDTH - left - 10) / max(len(versions), 1)
    bar = min(step / 3, 40)
    parts = [f'<line x1="{left}" y1="{top + height}" x2="{WIDTH - 10}" y2="{top + height}" stroke="#999"/>',
             f'<text x="2" y="{top + 4}">100%</text><text x="2" y="{top + height}">0%</text>']
    spans = []
    for i, v in enumerate(versions):
        x0 = left + i * step + step / 2 - bar
        for j, key in enumerate(("fail_rate", "flake_rate")):
            rate = v[key] or 0.0
            h = max(height * rate, 1.0)
            what = "runs failed" if key == "fail_rate" else "requests flaky"
            parts.append(f'<rect class="{key.replace("_", "-")}" data-version="{esc(v["version"])}" '
                         f'data-rate="{rate}" x="{x0 + j * bar:.1f}" y="{top + height - h:.1f}" '
                         f'width="{bar - 2:.1f}" height="{h:.1f}" fill="{RATE_COLOURS[key][0]}">'
                         f"<title>{esc(v['version'])}: {rate:.0%} {what} ({v['fail']} of "
                         f"{v['pass'] + v['fail']} runs failed, {v['flaky_requests']} flaky "
                         f"request(s), {v['error']} error run(s))</title></rect>")
        width = min(len(str(v["version"])) * CHAR + 4, 160.0)
        centre = left + i * step + step / 2
        spans.append((min(max(centre - width / 2, 2.0), WIDTH - width - 2), width))
    rows = stacked(spans)
    for v, (start, width), row in zip(versions, spans, rows):
        y = top + height + 14 + 14 * row
        parts.append(label(start, y, v["version"], width, cls="version"))
    items = [(swatch(c), what) for c, what in RATE_COLOURS.values()]
    return (legend(items, "rates-legend")
            + _svg("rates", top + height + 22 + 14 * max(rows, default=0), parts,
                   "fail and flake rates per server version"))


def coverage_plot(cov: dict[str, Any]) -> str:
    """A grid: one row per server version, one column per hit length, darker = more requests."""
    lengths = [int(k) for k in cov["hit_lengths"]]
    if not lengths:
        return '<p class="empty">No request of a judged run reported a cache-hit length.</p>'
    shown = sorted(lengths)[:MAX_LENGTH_COLUMNS]
    versions = list(cov["by_version"])
    left, top, row = 160, 30, 18
    cell = (WIDTH - left - 10) / len(shown)
    widest = max(len(str(n)) for n in shown) * CHAR + 6
    every = max(1, int(-(-widest // cell)))  # label every n-th column: labels never touch
    peak = max(n for v in versions for n in cov["by_version"][v]["hit_lengths"].values())
    parts = []
    for j, length in enumerate(shown):
        if j % every == 0:
            parts.append(f'<text class="length" x="{left + j * cell + cell / 2:.1f}" '
                         f'y="{top - 8}" text-anchor="middle">{length}</text>')
    for i, version in enumerate(versions):
        seen = cov["by_version"][version]["hit_lengths"]
        tiers = ", ".join(f"{t} {n}" for t, n in cov["by_version"][version]["tiers"].items())
        y = top + i * row
        parts.append(label(2, y + row - 5, version, left - 8, cls="version",
                           extra=f' data-tiers="{esc(tiers or "none reported")}"'))
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
    items = [(swatch("#1565c0"), "requests that hit this length (darker: more)")]
    return (legend(items, "coverage-legend")
            + _svg("coverage", top + len(versions) * row + 6, parts, "hit-length coverage")
            + note + f'<p class="muted tiers">Tiers: {esc(tiers)}</p>')


def unstable_plot(requests: list[dict[str, Any]]) -> str:
    """The requests that flip or fail most: a bar of their fail rate, their flips."""
    shaky = [r for r in requests if r["failed"]][:MAX_UNSTABLE]
    if not shaky:
        return '<p class="empty">No request failed in any judged run.</p>'
    left, row = 190, 20
    span = WIDTH - left - 230  # the words after the longest bar fit
    parts = []
    for i, r in enumerate(shaky):
        y = i * row + 4
        w = max(span * r["fail_rate"], 1.0)
        parts.append(label(2, y + 13, r["id"], left - 10, cls="request")
                     + f'<rect class="unstable" data-id="{esc(r["id"])}" data-flips="{r["flips"]}" '
                     f'x="{left}" y="{y}" width="{w:.1f}" height="{row - 5}" '
                     f'fill="{"#ef6c00" if r["flaky"] else "#c62828"}"><title>{esc(r["id"])}: failed '
                     f"{r['failed']} of {r['observed']}, {r['flips']} flip(s)"
                     f"{', flaky' if r['flaky'] else ''}</title></rect>"
                     f'<text x="{left + w + 6:.1f}" y="{y + 13}">{r["fail_rate"]:.0%} failed, '
                     f"{r['flips']} flip(s){' · flaky' if r['flaky'] else ''}</text>")
    items = [(swatch("#ef6c00"), "flaky (passed and failed on one setup)"),
             (swatch("#c62828"), "failed, not flaky")]
    return legend(items, "unstable-legend") + _svg("unstable", len(shaky) * row + 8, parts,
                                                    "most unstable requests")


def latest_runs(runs: list[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{esc(r['at'])}</td><td>{esc(r['golden'])}</td>"
        f"<td class=\"v-{esc(r['verdict'])}\">{esc(r['verdict'])}</td>"
        f"<td>{esc(r['server_version'])}</td><td>{esc(r['profile'] or r['server'])}</td>"
        f"<td>{esc(r['flags'])}</td><td class=\"client\">{esc(client_text(r))}</td>"
        f"<td class=\"tags\">{''.join(f'<span class=tag>{esc(t)}</span>' for t in tags(r))}</td>"
        f"<td>{r['requests_failed']}/{r['requests']}</td></tr>" for r in runs)
    return ('<section class="golden" id="latest"><h2>Latest runs</h2><table><tr><th>time</th>'
            "<th>golden</th><th>verdict</th><th>server version</th><th>profile or server</th>"
            "<th>flags</th><th>client</th><th>tags</th>"
            f"<th>failed</th></tr>{rows}</table></section>")
