"""Status grids: rows (repeats, or profiles) by request columns, one coloured cell each.

A fixed failing column is a real defect, a scattered one a flake; columns where every row
passed can be folded away by the 'only failing' toggle (report.js).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from replay.report.html.fields import anchor, ordered_ids
from replay.report.html.styles import style_of
from replay.report.html.values import esc, int_or


def cell(entry: dict[str, Any] | None, prefix: str, what: str, extra_class: str = "") -> str:
    """One coloured square: the status symbol, a tooltip, a link to the details if failing."""
    if entry is None:
        return f"<td class=\"absent{extra_class}\" title=\"not run\">\u00b7</td>"
    style = style_of(entry.get("status"))
    failed = not entry.get("passed", True)
    tip = f"{what}: {entry.get('status')}" + (" (failed)" if failed else "")
    first = entry.get("first_divergence")
    if isinstance(first, dict):
        tip += f", first divergence at {first.get('position')}"
    if entry.get("cache_problem"):
        tip += f", {entry['cache_problem']}"
    symbol = esc(style.symbol)
    inner = f"<a href=\"#{esc(anchor(prefix, entry))}\">{symbol}</a>" if failed else symbol
    border = f";outline:2px solid {style.stroke};outline-offset:-2px" if failed else ""
    state = "fail" if failed else "ok"
    return (f"<td class=\"{state}{extra_class}\" data-status=\"{esc(entry.get('status'))}\""
            f" title=\"{esc(tip)}\" style=\"background:{style.fill};color:{style.stroke}{border}\">"
            f"{inner}</td>")


@dataclass(frozen=True)
class GridRow:
    """One row of a request grid: a repeat, or a profile."""
    label: str
    prefix: str  # of the anchors its failing cells link to
    entries: dict[str, dict[str, Any]]  # request id -> entry
    note: str | None = None  # instead of "N failed" (a profile that never ran)

    def failed(self, rid: str) -> bool:
        return not self.entries.get(rid, {}).get("passed", True)


def grid_table(table_id: str, ids: Sequence[str], rows: Sequence[GridRow]) -> str:
    """Rows x request columns of status cells; columns where every row passed carry `allok`,
    so that the 'only failing' toggle can fold them away."""
    all_ok = {rid: not any(r.failed(rid) for r in rows) for rid in ids}

    def fold(rid: str) -> str:
        return " allok" if all_ok[rid] else ""

    head = "".join(f"<th class=\"v{fold(rid)}\">{esc(rid)}</th>" for rid in ids)
    body = []
    for row in rows:
        cells = "".join(cell(row.entries.get(rid), row.prefix, f"{row.label} {rid}", fold(rid))
                        for rid in ids)
        note = row.note or f"{sum(1 for rid in row.entries if row.failed(rid))} failed"
        body.append(f"<tr><th class=\"row\">{esc(row.label)}</th>{cells}"
                    f"<td class=\"sum\">{esc(note)}</td></tr>")
    counts = "".join(
        f"<td class=\"sum{fold(rid)}\" style=\"font-size:10px;width:22px;padding:0\">"
        f"{sum(1 for r in rows if r.failed(rid)) or ''}</td>" for rid in ids)
    toggle = (f"<label hidden><input type=\"checkbox\" class=\"only-failing-toggle\" "
              f"data-target=\"{esc(table_id)}\"> only requests that failed somewhere</label>")
    return (f"{toggle}<div class=\"scroll\"><table class=\"cells\" id=\"{esc(table_id)}\">"
            f"<tr><th></th>{head}<th></th></tr>{''.join(body)}"
            f"<tr><th class=\"row muted\">failures</th>{counts}<td></td></tr></table></div>")


def repeat_grid_card(requests: Sequence[dict[str, Any]], prefix: str) -> str:
    """Which repeats failed where: a fixed column is a real defect, a scattered one a flake."""
    ids = ordered_ids(requests)
    per_repeat: dict[int, dict[str, dict[str, Any]]] = {}
    for r in requests:
        per_repeat.setdefault(int_or(r.get("repeat"), 0), {})[str(r.get("id"))] = r
    rows = [GridRow(f"repeat {i}", prefix, entries) for i, entries in sorted(per_repeat.items())]
    return (f"<div class=\"card\" id=\"{prefix}repeat-grid\"><h2>Request \u00d7 repeat</h2>"
            "<div class=\"tip\">each repeat starts from an empty cache; a request that fails in "
            "every repeat is deterministic, one that fails in some is a flake</div>"
            f"{grid_table(prefix + 'repeat-grid-table', ids, rows)}</div>")
