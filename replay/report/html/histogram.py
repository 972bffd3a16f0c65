"""Where the cache hits landed: hit lengths against page and track boundaries, tiers served.

Bars sit on a linear length axis, so that a hit that misses a boundary stands out; the
boundaries come from the replay server's info, else from the cache expectation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any

from replay.report.html.fields import summary_of
from replay.report.html.styles import OTHER_TIER_COLOUR, TIER_COLOURS
from replay.report.html.values import dict_field, esc, positive_int


def cache_granularity(report: dict[str, Any]) -> tuple[int | None, int | None]:
    """(page size, track interval) for marking boundaries: from the replay server's info,
    else from the expectation string ("attention(page=64)", "mamba:128")."""
    info = dict_field(dict_field(report, "server_meta"), "server_info")
    expect = str(report.get("expect_cache") or "")
    page = positive_int(info.get("page_size"))
    m = re.search(r"page=(\d+)", expect)
    if page is None and m:
        page = int(m[1])
    track = None
    m = re.match(r"mamba:(\d+)", expect)
    if m:
        track = int(m[1])
    elif not expect or expect == "auto":
        track = positive_int(info.get("mamba_track_interval"))
    return page, track


def hit_lengths(summary: dict[str, Any]) -> list[tuple[int, int]]:
    """(length, count) pairs, sorted; keys that are not integers are skipped."""
    pairs = []
    for k, v in dict_field(summary, "cache_hit_lengths").items():
        try:
            pairs.append((int(k), int(v)))
        except (TypeError, ValueError):
            continue
    return sorted(pairs)


def alignment(length: int, page: int | None, track: int | None) -> str:
    if length == 0:
        return "no hit"
    if track and length % track == 0:
        return "track boundary"
    if page and page > 1 and length % page == 0:
        return "page boundary"
    if page and page > 1:
        return "off page boundary"
    return "—"


ALIGN_COLOURS = MappingProxyType({"no hit": "#9e9e9e", "track boundary": "#2e7d32",
                                  "page boundary": "#1565c0", "off page boundary": "#e65100",
                                  "—": "#1565c0"})


def histogram_svg(pairs: Sequence[tuple[int, int]], page: int | None, track: int | None) -> str:
    """Bars on a linear length axis, so that a hit that misses a boundary stands out."""
    w, h, left, right, top, bottom = 620, 220, 40, 14, 18, 34
    pw, ph = w - left - right, h - top - bottom
    step = track or page or 1
    max_len = max((L for L, _ in pairs), default=0)
    span = max(step, int(math.ceil((max_len + 1) / step) * step))
    max_count = max((c for _, c in pairs), default=1)

    def x(v: float) -> float:
        return left + pw * v / span

    def y(c: float) -> float:
        return top + ph - ph * c / max_count

    out = [f"<svg class=\"hist\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" "
           "aria-label=\"cache-hit lengths\">"]
    out += boundary_lines(page, span, x, top, top + ph, "#d0d7de", "1", "page")
    out += boundary_lines(track, span, x, top, top + ph, "#2e7d32", "1.2", "track", dash="4 3")
    out.append(f"<line x1=\"{left}\" y1=\"{top + ph}\" x2=\"{left + pw}\" y2=\"{top + ph}\" "
               "stroke=\"#57606a\"/>")
    out += axis_ticks(span, step, x, top + ph)
    bar_w = max(3.0, min(14.0, pw / max(len(pairs), 1) / 3))
    for length, count in pairs:
        kind = alignment(length, page, track)
        cx = x(length)
        cy = y(count)
        out.append(f"<g class=\"bar\" data-length=\"{length}\"><rect x=\"{cx - bar_w / 2:.1f}\" "
                   f"y=\"{cy:.1f}\" width=\"{bar_w:.1f}\" height=\"{top + ph - cy:.1f}\""
                   f" fill=\"{ALIGN_COLOURS[kind]}\"/><text x=\"{cx:.1f}\" y=\"{cy - 3:.1f}\" "
                   f"text-anchor=\"middle\" font-size=\"10\">{count}</text>"
                   f"<title>{length} cached tokens: {count} request(s), {esc(kind)}</title></g>")
    out.append(f"<text x=\"{left + pw / 2}\" y=\"{h - 4}\" text-anchor=\"middle\" font-size=\"11\" "
               "fill=\"#57606a\">cached tokens per request</text></svg>")
    return "".join(out)


def boundary_lines(step: int | None, span: int, x: Callable[[float], float], y0: float, y1: float,
                   colour: str, width: str, kind: str, dash: str | None = None) -> list[str]:
    """Vertical lines at every multiple of `step` (skipped when they would be a solid wall)."""
    if not step or step <= 1 or span / step > 160:
        return []
    dash_attr = f" stroke-dasharray=\"{dash}\"" if dash else ""
    return [f"<line class=\"{kind}-boundary\" x1=\"{x(v):.1f}\" y1=\"{y0}\" x2=\"{x(v):.1f}\" "
            f"y2=\"{y1}\" stroke=\"{colour}\" stroke-width=\"{width}\"{dash_attr}/>"
            for v in range(step, span + 1, step)]


def axis_ticks(span: int, step: int, x: Callable[[float], float], y: float) -> list[str]:
    """Labels at multiples of the boundary step, thinned to at most ~12."""
    every = step * max(1, math.ceil(span / step / 12))
    return [f"<text x=\"{x(v):.1f}\" y=\"{y + 14}\" text-anchor=\"middle\" font-size=\"10\" "
            f"fill=\"#57606a\">{v}</text>" for v in range(0, span + 1, every)]


def histogram_card(report: dict[str, Any], prefix: str) -> str:
    summary = summary_of(report)
    pairs = hit_lengths(summary)
    page, track = cache_granularity(report)
    if not pairs:
        return (f"<div class=\"card\" id=\"{prefix}histogram\"><h2>Cache-hit lengths</h2>"
                "<p class=\"muted\">No cache hits recorded.</p></div>")
    named = ((f"page {page}" if page else ""), (f"track {track}" if track else ""))
    bounds = ", ".join(p for p in named if p) or "none known"
    legend = "".join(f"<span><span class=\"sw\" style=\"background:{c}\"></span>{esc(k)}</span>"
                     for k, c in ALIGN_COLOURS.items() if k != "—")
    rows = "".join(f"<tr><td class=\"num\">{L}</td><td class=\"num\">{c}</td>"
                   f"<td>{esc(alignment(L, page, track))}</td></tr>" for L, c in pairs)
    return (
        f"<div class=\"card\" id=\"{prefix}histogram\"><h2>Cache-hit lengths</h2>"
        f"<div class=\"legend\">{legend}<span>boundaries: {esc(bounds)} (grey: page, dashed green:"
        f" track)</span></div><div class=\"scroll\">{histogram_svg(pairs, page, track)}</div>"
        "<details><summary>as a table</summary><table><tr><th>cached</th><th>requests</th>"
        f"<th>lands on</th></tr>{rows}</table></details></div>"
    )


def tier_bar_svg(tiers: dict[str, Any], prefix: str) -> str:
    """One stacked bar: how many cached tokens each tier served."""
    parts = [(str(k), int(v)) for k, v in tiers.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf]
    total = sum(v for _, v in parts)
    if not total:
        return f"<p class=\"muted\" id=\"{prefix}tiers\">No cached tokens reported.</p>"
    w, h = 480, 46
    x = 0.0
    out = [f"<svg id=\"{prefix}tiers\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" "
           "role=\"img\" aria-label=\"cached tokens by tier\">"]
    legend_x = 0.0
    for name, v in parts:
        colour = TIER_COLOURS.get(name, OTHER_TIER_COLOUR)
        seg = w * v / total
        out.append(f"<rect x=\"{x:.1f}\" y=\"0\" width=\"{seg:.1f}\" height=\"20\" "
                   f"fill=\"{colour}\"><title>{esc(name)}: {v} tokens "
                   f"({100 * v / total:.1f}%)</title></rect>")
        x += seg
        label = f"{name} {v} ({100 * v / total:.0f}%)"
        out.append(f"<rect x=\"{legend_x:.1f}\" y=\"30\" width=\"10\" height=\"10\" "
                   f"fill=\"{colour}\"/><text x=\"{legend_x + 14:.1f}\" y=\"39\" font-size=\"11\">"
                   f"{esc(label)}</text>")
        legend_x += 22 + 6.5 * len(label)
    out.append("</svg>")
    return "".join(out)
