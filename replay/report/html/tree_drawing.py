"""The conversation tree as SVG: groups on the left, a row per branch, turns left to right.

Each edge carries the cache hit of the request it leads to, each node the worst status of its
request over repeats; failing nodes link to their details. Ids are read with
`replay.golden.tree.parse_request_id` (one place for the id format); an id outside it gets a row of
its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from replay.report.html.fields import anchor, by_id, ordered_ids, worst
from replay.report.html.styles import ERROR, STATUS_STYLES, style_of
from replay.report.html.values import dict_field, esc, fmt
from replay.golden.tree import parse_request_id


TREE_NODE_W, TREE_NODE_H, TREE_ROW_H, TREE_GAP = 92, 24, 46, 120
TREE_GROUP_W, TREE_LEFT, TREE_TOP = 44, 8, 10


@dataclass(frozen=True)
class TreeRow:
    """One branch of one group: its turns in order (or one request whose id is not g/b/t)."""
    group: str
    turns: tuple[tuple[int, str], ...]  # (turn, request id)


def tree_rows(ids: Sequence[str]) -> list[TreeRow]:
    """Rows of the tree: one per (group, branch), in numeric order; odd ids get a row each."""
    branches: dict[tuple[int, int], list[tuple[int, str]]] = {}
    odd: list[str] = []
    for rid in ids:
        parsed = parse_request_id(rid)
        if parsed is None:
            odd.append(rid)
            continue
        g, b, t = parsed
        branches.setdefault((g, b), []).append((t, rid))
    rows = [TreeRow(f"g{g}", tuple(sorted(turns))) for (g, b), turns in sorted(branches.items())]
    rows += [TreeRow("?", ((0, rid),)) for rid in odd]
    return rows


def turn_x(turn: int) -> float:
    return TREE_LEFT + TREE_GROUP_W + TREE_GAP + turn * (TREE_NODE_W + TREE_GAP)


def edge_label(entry: dict[str, Any]) -> tuple[str, str, str]:
    """For the edge into a request: the cached length (above the edge), the tier split (below;
    empty when everything came from the device) and a long tooltip."""
    cached = entry.get("cached_tokens")
    details = {str(k): v for k, v in dict_field(entry, "cached_tokens_details").items()}
    used = {k: v for k, v in details.items() if v}
    split = " ".join(f"{k[:1]}{v}" for k, v in used.items()) if set(used) - {"device"} else ""
    long = f"cached {cached}" + (
        ": " + ", ".join(f"{k} {v}" for k, v in details.items()) if details else "")
    expected = entry.get("expected_min_cached")
    if expected is not None:
        long += f"; expected at least {expected}"
    if entry.get("cache_problem"):
        long += f"; {entry['cache_problem']}"
    return fmt(cached), split, long


def node_marker(entry: dict[str, Any]) -> str | None:
    """What to write under a node: the first divergence position, or the cache problem."""
    first = entry.get("first_divergence")
    if isinstance(first, dict) and first.get("position") is not None:
        return f"pos {first['position']}"
    if entry.get("cache_problem"):
        expected = entry.get("expected_min_cached")
        if expected is not None:
            return f"miss {entry.get('cached_tokens')}<{expected}"
        return "cache problem"
    if entry.get("status") == ERROR:
        return "error"
    return None


def node_tooltip(rid: str, entries: Sequence[dict[str, Any]]) -> str:
    lines = [rid]
    for e in entries:
        line = f"repeat {e.get('repeat', 0)}: {e.get('status')}" + (
            "" if e.get("passed", True) else " (failed)")
        first = e.get("first_divergence")
        if isinstance(first, dict):
            line += f", first divergence at {first.get('position')} ({first.get('kind')})"
        if e.get("cache_problem"):
            line += f", {e['cache_problem']}"
        lines.append(line)
    return "\n".join(lines)


def tree_svg(requests: Sequence[dict[str, Any]], prefix: str) -> str:
    """Groups on the left, one row per branch, turns left to right; each edge carries the cache
    hit of the request it leads to."""
    grouped = by_id(requests)
    rows = tree_rows(list(grouped))
    width = tree_width(rows)
    height = TREE_TOP * 2 + TREE_ROW_H * max(len(rows), 1)
    repeats = max((len(v) for v in grouped.values()), default=1)
    centres = group_centres(rows)
    edges: list[str] = []
    nodes: list[str] = []
    for i, row in enumerate(rows):
        cy = row_centre(i)
        parent_x, parent_y = TREE_LEFT + TREE_GROUP_W, centres.get(row.group, cy)
        for turn, rid in row.turns:
            entries = grouped[rid]
            shown = worst(entries)
            x = turn_x(turn)
            edges.append(tree_edge(parent_x, parent_y, x, cy, shown))
            nodes.append(tree_node(x, cy, rid, entries, shown, repeats, prefix))
            parent_x, parent_y = x + TREE_NODE_W, cy
    groups = [tree_group(name, [i for i, r in enumerate(rows) if r.group == name])
              for name in centres]
    return (f"<svg class=\"tree\" width=\"{width}\" height=\"{height}\" "
            f"viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"conversation tree\">"
            f"{''.join(edges)}{''.join(groups)}{''.join(nodes)}</svg>")


def tree_width(rows: Sequence[TreeRow]) -> int:
    max_turn = max((t for row in rows for t, _ in row.turns), default=0)
    return int(turn_x(max_turn) + TREE_NODE_W + 12)


def row_centre(i: int) -> float:
    return TREE_TOP + i * TREE_ROW_H + TREE_NODE_H / 2 + 4


def group_centres(rows: Sequence[TreeRow]) -> dict[str, float]:
    """Vertical centre of each group's box: the middle of its rows (odd ids have no group)."""
    spans: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        if row.group != "?":
            spans.setdefault(row.group, []).append(i)
    return {g: (row_centre(idx[0]) + row_centre(idx[-1])) / 2 for g, idx in spans.items()}


def tree_group(name: str, idx: Sequence[int]) -> str:
    top = TREE_TOP + idx[0] * TREE_ROW_H + 4
    bottom = TREE_TOP + idx[-1] * TREE_ROW_H + 4 + TREE_NODE_H
    return (f"<g class=\"group\"><rect x=\"{TREE_LEFT}\" y=\"{top}\" width=\"{TREE_GROUP_W}\" "
            f"height=\"{bottom - top}\" rx=\"6\" fill=\"#eaeef2\" stroke=\"#8c959f\"/>"
            f"<text x=\"{TREE_LEFT + TREE_GROUP_W / 2}\" y=\"{(top + bottom) / 2 + 4}\" "
            f"text-anchor=\"middle\" font-size=\"13\" font-weight=\"600\">{esc(name)}</text>"
            f"<title>{esc(name)}: shared prefix of its branches</title></g>")


def tree_edge(x0: float, y0: float, x1: float, y1: float, entry: dict[str, Any]) -> str:
    """An elbow from the parent to the request, labelled with the request's cache hit."""
    bend = x0 + 18
    cached, split, long = edge_label(entry)
    colour = "#5e35b1" if entry.get("cache_problem") else "#8c959f"
    width = 2.5 if entry.get("cache_problem") else 1.4
    path = f"M{x0:.1f},{y0:.1f} H{bend:.1f} V{y1:.1f} H{x1:.1f}"
    below = (f"<text x=\"{x1 - 6:.1f}\" y=\"{y1 + 12:.1f}\" text-anchor=\"end\" font-size=\"10\" "
             f"fill=\"{colour}\" class=\"mono\">{esc(split)}</text>") if split else ""
    return (f"<g class=\"edge\"><path d=\"{path}\" fill=\"none\" stroke=\"{colour}\" "
            f"stroke-width=\"{width}\"/><text x=\"{x1 - 6:.1f}\" y=\"{y1 - 5:.1f}\" "
            f"text-anchor=\"end\" font-size=\"11\" fill=\"{colour}\" class=\"mono\">{cached}"
            f"</text>{below}<title>{esc(long)}</title></g>")


def tree_node(x: float, cy: float, rid: str, entries: Sequence[dict[str, Any]],
              shown: dict[str, Any], repeats: int, prefix: str) -> str:
    status = str(shown.get("status"))
    style = style_of(status)
    failed = sum(1 for e in entries if not e.get("passed", True))
    y = cy - TREE_NODE_H / 2
    label = rid + (f"  {failed}/{len(entries)}" if repeats > 1 and failed else "")
    marker = node_marker(shown)
    marker_svg = ""
    if marker:
        marker_svg = (f"<path d=\"M{x + 8:.1f},{y + TREE_NODE_H + 9:.1f} l4,-6 l4,6 z\" "
                      f"fill=\"{style.stroke}\"/><text x=\"{x + 19:.1f}\" "
                      f"y=\"{y + TREE_NODE_H + 10:.1f}\" font-size=\"11\" fill=\"{style.stroke}\" "
                      f"class=\"marker\">{esc(marker)}</text>")
    body = (f"<rect x=\"{x:.1f}\" y=\"{y:.1f}\" width=\"{TREE_NODE_W}\" height=\"{TREE_NODE_H}\" "
            f"rx=\"5\" fill=\"{style.fill}\" stroke=\"{style.stroke}\" "
            f"stroke-width=\"{1 if not failed else 2.5}\"/>"
            f"<text x=\"{x + TREE_NODE_W / 2:.1f}\" y=\"{cy + 4:.1f}\" text-anchor=\"middle\" "
            f"font-size=\"12\" class=\"mono\">{esc(label)}</text>{marker_svg}"
            f"<title>{esc(node_tooltip(rid, entries))}</title>")
    node = (f"<g class=\"node\" data-id=\"{esc(rid)}\" data-status=\"{esc(status)}\">{body}</g>")
    if failed:
        return f"<a href=\"#{esc(anchor(prefix, shown))}\">{node}</a>"
    return node


def tree_card(requests: Sequence[dict[str, Any]], prefix: str) -> str:
    legend = "".join(
        f"<span><span class=\"sw\" style=\"background:{s.fill};border-color:{s.stroke}\"></span>"
        f"{esc(name)}</span>" for name, s in STATUS_STYLES.items())
    width = tree_width(tree_rows(ordered_ids(requests))) + 30  # the card hugs the drawing
    return (
        f"<div class=\"card fit\" id=\"{prefix}tree\" style=\"width:{width}px\">"
        "<h2>Conversation tree</h2>"
        f"<div class=\"legend\">{legend}<span>edge: cached tokens; below it the tier split when "
        "not all from device (d/h/s = device/host/storage)</span>"
        "<span>\u25b2 first divergence / cache miss</span></div>"
        f"<div class=\"scroll\">{tree_svg(requests, prefix)}</div></div>"
    )
