"""Per-position charts: a request's |delta logprob| or ULP distance by output position.

Bars on a log axis; a zero is a grey tick on the axis, a non-finite value a full-height purple
bar with its name, the first divergence a dashed red line; the chart in words is its tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from replay.report.html.values import as_float, esc


@dataclass(frozen=True)
class PositionSeries:
    """Per-position values split into what a log axis can draw and what it cannot."""
    finite: tuple[tuple[int, float], ...]  # (position, value > 0)
    zero: tuple[int, ...]
    nonfinite: tuple[tuple[int, str], ...]  # (position, "inf" | "nan" | ...)

    @staticmethod
    def of(values: Sequence[Any]) -> PositionSeries:
        finite, zero, nonfinite = [], [], []
        for i, raw in enumerate(values):
            v = as_float(raw)
            if v is None or not math.isfinite(v):
                nonfinite.append((i, str(raw).lower()))
            elif v == 0:
                zero.append(i)
            else:
                finite.append((i, abs(v)))
        return PositionSeries(tuple(finite), tuple(zero), tuple(nonfinite))


def log_range(values: Iterable[float]) -> tuple[float, int]:
    """(bottom, top) of a log10 axis: a whole decade at the top; at the bottom the decade below
    the smallest value, or half a decade under it when it sits on a decade (1 ulp would
    otherwise be a bar of height zero)."""
    vals = list(values)
    if not vals:
        return -0.5, 1
    smallest = math.log10(min(vals))
    lo: float = math.floor(smallest)
    if smallest - lo < 0.2:
        lo -= 0.5
    hi = math.ceil(math.log10(max(vals)))
    return lo, max(hi, math.ceil(lo) + 1)


def decade_label(d: int, integers: bool) -> str:
    """1e-7 for deltas; 1, 10, 100, 1e3 for ulp counts."""
    if integers and 0 <= d <= 2:
        return str(10**d)
    return f"1e{d}"


def position_chart(title: str, values: Sequence[Any], marker: int, kind: str,
                   integers: bool = False) -> str:
    """Bars on a log axis: a zero is a grey tick on the axis, a non-finite value a full-height
    purple bar with its name, the first divergence a dashed red line."""
    w, h, left, right, top, bottom = 640, 190, 52, 12, 22, 30
    pw, ph = w - left - right, h - top - bottom
    series = PositionSeries.of(values)
    n = max(len(values), 1)
    lo, hi = log_range(v for _, v in series.finite)
    slot = pw / n

    def x(pos: float) -> float:
        return left + slot * (pos + 0.5)

    def y(v: float) -> float:
        return top + ph - ph * (math.log10(v) - lo) / (hi - lo)

    bar = max(1.0, min(10.0, slot * 0.7))
    base = top + ph
    finite_path = "".join(f"M{x(p):.1f},{base:.1f}V{y(v):.1f}" for p, v in series.finite)
    zero_path = "".join(f"M{x(p):.1f},{base:.1f}V{base + 3:.1f}" for p in series.zero)
    nonfinite_path = "".join(f"M{x(p):.1f},{base:.1f}V{top:.1f}" for p, _ in series.nonfinite)
    out = [f"<svg class=\"chart {esc(kind)}\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" "
           f"role=\"img\" aria-label=\"{esc(title)}\">"
           f"<text x=\"{left}\" y=\"14\" font-size=\"12\" font-weight=\"600\">{esc(title)}</text>"]
    for d in range(math.ceil(lo), hi + 1):
        yy = top + ph - ph * (d - lo) / (hi - lo)
        out.append(f"<line x1=\"{left}\" x2=\"{left + pw}\" y1=\"{yy:.1f}\" y2=\"{yy:.1f}\" "
                   f"stroke=\"#eaeef2\"/><text x=\"{left - 4}\" y=\"{yy + 3:.1f}\" "
                   f"text-anchor=\"end\" font-size=\"10\" fill=\"#57606a\">"
                   f"{decade_label(d, integers)}</text>")
    out.append(f"<line x1=\"{left}\" x2=\"{left + pw}\" y1=\"{base}\" y2=\"{base}\" "
               "stroke=\"#57606a\"/>")
    out += position_ticks(n, x, base)
    if 0 <= marker < n:
        out.append(f"<line class=\"first-divergence\" x1=\"{x(marker):.1f}\" x2=\"{x(marker):.1f}\""
                   f" y1=\"{top}\" y2=\"{base}\" stroke=\"#c62828\" stroke-dasharray=\"3 3\"/>"
                   f"<text x=\"{x(marker) + (3 if marker < n * 0.8 else -3):.1f}\" "
                   f"y=\"{top + 9}\" font-size=\"10\" fill=\"#c62828\" "
                   f"text-anchor=\"{'start' if marker < n * 0.8 else 'end'}\">pos {marker}</text>")
    for path, colour in ((finite_path, "#1565c0"), (zero_path, "#9e9e9e"),
                         (nonfinite_path, "#8e24aa")):
        if path:
            out.append(f"<path d=\"{path}\" stroke=\"{colour}\" stroke-width=\"{bar:.1f}\" "
                       "fill=\"none\"/>")
    for p, name in series.nonfinite[:8]:
        out.append(f"<text class=\"nonfinite\" x=\"{x(p):.1f}\" y=\"{top - 2}\" "
                   f"text-anchor=\"middle\" font-size=\"10\" fill=\"#8e24aa\">{esc(name)}</text>")
    out.append(f"<title>{esc(chart_summary(title, series, len(values)))}</title></svg>")
    return "".join(out)


def position_ticks(n: int, x: Callable[[float], float], base: float) -> list[str]:
    step = nice_step(n)
    return [f"<text x=\"{x(p):.1f}\" y=\"{base + 13:.1f}\" text-anchor=\"middle\" "
            f"font-size=\"10\" fill=\"#57606a\">{p}</text>" for p in range(0, n, step)]


def nice_step(n: int, ticks: int = 10) -> int:
    """1, 2, 5, 10, 20, 50... so that there are about `ticks` labels."""
    raw = max(1, n / ticks)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return int(m * mag)
    return int(10 * mag)


def chart_summary(title: str, series: PositionSeries, n: int) -> str:
    """The chart in words (a tooltip, and what a screen reader gets)."""
    parts = [f"{title}: {n} positions", f"{len(series.zero)} equal"]
    if series.finite:
        mx = max(series.finite, key=lambda pv: pv[1])
        parts.append(f"{len(series.finite)} differ (max {mx[1]!r} at {mx[0]})")
    if series.nonfinite:
        parts.append(f"{len(series.nonfinite)} non-finite (first at {series.nonfinite[0][0]})")
    return ", ".join(parts)
