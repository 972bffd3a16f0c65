"""The page frame: the HTML document around the body, its inline CSS and JS, the verdict banner.

Self-contained (see replay/report/html/__init__.py): the stylesheet and the script are package data
(report.css, report.js) read here and inlined, and a Content-Security-Policy forbids any load.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from replay.report.html.fields import verdict_of
from replay.report.html.styles import VERDICT_COLOURS
from replay.report.html.values import esc, list_field


def asset(name: str) -> str:
    """The text of a file shipped in this package (report.css, report.js)."""
    return files("replay.report.html").joinpath(name).read_text(encoding="utf-8")


def page(title: str, body: str) -> str:
    """The document: no external resource of any kind, and a CSP that forbids them anyway."""
    csp = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{esc(csp)}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        "<meta name=\"referrer\" content=\"no-referrer\">\n"
        f"<title>{esc(title)}</title>\n<style>\n{asset('report.css')}</style>\n</head>\n<body>\n"
        f"{body}\n<script>\n{asset('report.js')}</script>\n</body>\n</html>\n"
    )


def page_banner(report: dict[str, Any], matrix: dict[str, Any] | None) -> str:
    """The big coloured verdict and what was compared with what."""
    verdict = verdict_of(report, matrix)
    colour = VERDICT_COLOURS.get(verdict, VERDICT_COLOURS["error"])
    what = [f"<b>{esc(report.get('golden') or '?')}</b>"]
    if matrix is not None:
        profiles = [str(p) for p in list_field(matrix, "profiles")]
        what.append(f"matrix over {len(profiles)} profile(s): {esc(', '.join(profiles))}")
    if report.get("server"):
        what.append(f"replayed against <b>{esc(report['server'])}</b>")
    what.append(f"policy <b>{esc(report.get('policy') or '?')}</b>"
                + (f", expect cache <b>{esc(report['expect_cache'])}</b>"
                   if report.get("expect_cache") else ""))
    hint = ("<div class=\"what\" id=\"keys-hint\" hidden>keys: <b>n</b> / <b>p</b> jump to the "
            "next / previous failing request</div>")
    return (
        f"<header class=\"banner\" id=\"verdict\" data-verdict=\"{esc(verdict)}\" "
        f"style=\"background:{colour}\">"
        f"<div class=\"verdict\">{esc(verdict.upper())}</div>"
        f"<div><h1>golden-replay report</h1><div class=\"what\">{'<br>'.join(what)}</div>"
        f"{hint}</div></header>"
    )
