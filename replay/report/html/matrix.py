"""The matrix section: profile by request, then each profile's own report, folded.

Anchors of a profile's report are prefixed with the profile's name, so that profiles never
collide; a profile without a verdict takes the one the matrix declares for it.
"""

from __future__ import annotations

from typing import Any

from replay.report.html.body import report_body
from replay.report.html.fields import by_id, is_verdict, ordered_ids, requests_of, verdict_of, worst
from replay.report.html.grid import GridRow, grid_table
from replay.report.html.styles import VERDICT_COLOURS
from replay.report.html.values import dict_field, esc, list_field, slug


def profile_prefix(name: str) -> str:
    return f"p-{slug(name)}--"


def matrix_profiles(matrix: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, report) in the declared profile order, then any report not declared."""
    reports = dict_field(matrix, "reports")
    names = [str(p) for p in list_field(matrix, "profiles")]
    names += [n for n in reports if n not in names]
    declared = dict_field(matrix, "verdicts")
    out = []
    for n in names:
        rep = reports[n] if isinstance(reports.get(n), dict) else {}
        if not is_verdict(rep.get("verdict")) and is_verdict(declared.get(n)):
            rep = {**rep, "verdict": declared[n]}
        out.append((n, rep))
    return out


def matrix_section(matrix: dict[str, Any]) -> str:
    """Profile x request: which server set-up breaks which request."""
    profiles = matrix_profiles(matrix)
    ids = ordered_ids(r for _, rep in profiles for r in requests_of(rep))
    rows = []
    for name, rep in profiles:
        worst_by_id = {rid: worst(entries) for rid, entries in by_id(requests_of(rep)).items()}
        label = f"{name} [{verdict_of(rep)}]"
        note = "did not run" if not worst_by_id and verdict_of(rep) == "error" else None
        rows.append(GridRow(label, profile_prefix(name), worst_by_id, note))
    verdicts = "".join(
        f"<span class=\"pill\" style=\"color:{VERDICT_COLOURS.get(verdict_of(rep), '#555')};"
        f"border-color:currentColor\"><a href=\"#{esc(profile_prefix(name))}profile\" "
        f"style=\"color:inherit\">{esc(name)}: {esc(verdict_of(rep))}</a></span> "
        for name, rep in profiles)
    errors = "".join(f"<div class=\"alert error\"><b>{esc(name)}:</b> "
                     f"{esc(str(rep['error']).splitlines()[0] if str(rep['error']) else '')}</div>"
                     for name, rep in profiles if rep.get("error"))
    grid = (grid_table("matrix-grid-table", ids, rows) if ids
            else "<p class=\"muted\">no requests</p>")
    return (f"<div class=\"card\" id=\"matrix\"><h2>Profile \u00d7 request</h2>"
            f"<div class=\"legend\">{verdicts}</div>{errors}{grid}"
            "<div class=\"tip\">a cell shows the worst status of that request over the profile's "
            "repeats</div></div>")


def matrix_profile_sections(matrix: dict[str, Any]) -> list[str]:
    """Each profile's full report, folded; failing ones open."""
    out = []
    for name, rep in matrix_profiles(matrix):
        verdict = verdict_of(rep)
        colour = VERDICT_COLOURS.get(verdict, "#555")
        is_open = " open" if verdict != "pass" else ""
        out.append(
            f"<details class=\"profile card\" id=\"{esc(profile_prefix(name))}profile\"{is_open}>"
            f"<summary>profile {esc(name)}: <span style=\"color:{colour}\">{esc(verdict.upper())}"
            f"</span> <span class=\"muted\">{esc(rep.get('server') or '')}</span></summary>"
            f"{report_body(rep, profile_prefix(name))}</details>")
    return out
