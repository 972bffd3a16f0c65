"""The first divergence in detail: golden and replay token, value and float64 bits side by side
(differing hex digits marked), and both top-k lists at that position with why each rank differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from replay.utils.bits import ulp_distance
from replay.report.html.values import as_float, esc, fmt, list_field


def bits_markup(mine: Any, other: Any) -> str:
    """Hex bits with the hex digits that differ from the other side marked."""
    if not isinstance(mine, str):
        return fmt(mine)
    if not isinstance(other, str) or len(other) != len(mine):
        return esc(mine)
    return "".join(f"<mark>{esc(a)}</mark>" if a != b else esc(a) for a, b in zip(mine, other))


def first_divergence_table(f: dict[str, Any]) -> str:
    gb, rb = f.get("golden_bits"), f.get("replay_bits")
    tok_diff = f.get("golden_token") != f.get("replay_token")
    return (
        f"<table class=\"first\"><tr><th>first divergence</th><th>token</th><th>logprob</th>"
        f"<th>bits (float64)</th></tr>"
        f"<tr><td>golden</td><td class=\"num\">{fmt(f.get('golden_token'))}</td>"
        f"<td class=\"num\">{fmt(f.get('golden_logprob'))}</td><td class=\"mono\">"
        f"{bits_markup(gb, rb)}</td></tr>"
        f"<tr><td>replay</td><td class=\"num\">"
        f"{'<mark>' if tok_diff else ''}{fmt(f.get('replay_token'))}{'</mark>' if tok_diff else ''}"
        f"</td><td class=\"num\">{fmt(f.get('replay_logprob'))}</td><td class=\"mono\">"
        f"{bits_markup(rb, gb)}</td></tr></table>"
        f"<div class=\"tip\">at output position <b>{fmt(f.get('position'))}</b> "
        f"({fmt(f.get('kind'))}), {fmt(f.get('ulp'))} ulp apart</div>"
    )


def top_k_table(top: dict[str, Any]) -> str:
    """Golden and replay top-k side by side at the first divergence; rows that differ marked."""
    golden = [p for p in list_field(top, "golden") if isinstance(p, list) and len(p) >= 2]
    replay = [p for p in list_field(top, "replay") if isinstance(p, list) and len(p) >= 2]
    golden_rank = {repr(p[0]): rank for rank, p in enumerate(golden)}
    rows = []
    for rank in range(max(len(golden), len(replay))):
        g = golden[rank] if rank < len(golden) else None
        r = replay[rank] if rank < len(replay) else None
        note = top_k_note(g, r, golden_rank)
        cls = " class=\"diff\"" if note != "same" else ""
        rows.append(
            f"<tr><td class=\"num\">{rank}</td>"
            f"<td class=\"num\"{cls}>{fmt(g[0]) if g else ''}</td>"
            f"<td class=\"num\">{fmt(g[1]) if g else ''}</td>"
            f"<td class=\"mono\">{bits_of(g[1]) if g else ''}</td>"
            f"<td class=\"num\"{cls}>{fmt(r[0]) if r else ''}</td>"
            f"<td class=\"num\">{fmt(r[1]) if r else ''}</td>"
            f"<td class=\"mono\">{bits_of(r[1]) if r else ''}</td><td>{esc(note)}</td></tr>")
    return (f"<h3 style=\"margin-top:12px\">Top-k at position {fmt(top.get('position'))}</h3>"
            "<div class=\"scroll\"><table class=\"topk\"><tr><th>rank</th><th>golden token</th>"
            "<th>logprob</th><th>bits</th><th>replay token</th><th>logprob</th><th>bits</th>"
            f"<th></th></tr>{''.join(rows)}</table></div>")


def bits_of(value: Any) -> str:
    """Hex float64 bits of a top-k value (computed here: the report keeps them for the first
    divergence only). Non-finite strings are shown as written."""
    v = as_float(value)
    if v is None or isinstance(value, str):
        return fmt(value)
    return esc("0x" + format(int(np.array(v, np.float64).view(np.uint64)), "016x"))


def top_k_note(g: Sequence[Any] | None, r: Sequence[Any] | None,
               golden_rank: dict[str, int]) -> str:
    """Why a rank differs: another token, or the same token with a value some ulp away."""
    if g is None or r is None:
        return "missing on one side"
    if g[0] != r[0]:
        if repr(r[0]) in golden_rank:
            return f"replay token {r[0]} was golden rank {golden_rank[repr(r[0])]}"
        return "token differs"
    a, b = as_float(g[1]), as_float(r[1])
    if a is None or b is None:
        return "value not a number"
    if bits_of(g[1]) == bits_of(r[1]):
        return "same"
    d = int(ulp_distance(np.array([a]), np.array([b]))[0])
    return f"value differs ({d} ulp)" if d < 2**62 else "value differs (non-finite)"
