"""A replay report (docs/report.md) as one self-contained HTML page (docs/report-html.md).

Why a page at all: a failing replay is a tree of requests, a histogram of hit lengths and a few
thousand per-position deltas; a table of numbers hides the pattern (drift that starts at a track
boundary, one tier that always misses, a repeat that flakes). The page draws them.

Self-contained on purpose: reports are attached to CI runs and opened from disk or an artifact
store, often offline, and a page that fetches nothing cannot leak a lab's host names or break when
a CDN moves. So: inline CSS, a few lines of inline JS (only enhancements; everything is readable
without it), SVG drawn here, no URL in any attribute except same-page `#anchors`. Every piece of
report text goes through `html.escape`.

Pure: `render_html` takes the report dict and returns a string; only `write_html` touches disk.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from replay.bits import ulp_distance

SCHEMA_PREFIX = "golden-replay/report/"
MAX_DETAILED = 60  # failing (request, repeat) entries drawn in full; the rest are listed only

IDENTICAL = "identical"
LOGPROB_DRIFT = "logprob_drift"
TOKEN_DIVERGENCE = "token_divergence"
CACHE_MISS = "cache_miss"
ERROR = "error"


@dataclass(frozen=True)
class StatusStyle:
    fill: str
    stroke: str
    symbol: str  # one character for grid cells, readable without colour
    rank: int  # how bad: the worst status of a request over repeats decides its colour


STATUS_STYLES = MappingProxyType({
    IDENTICAL: StatusStyle("#c8e6c9", "#2e7d32", "\u2713", 0),
    CACHE_MISS: StatusStyle("#d1c4e9", "#5e35b1", "C", 1),
    LOGPROB_DRIFT: StatusStyle("#ffe082", "#b26a00", "~", 2),
    TOKEN_DIVERGENCE: StatusStyle("#ef9a9a", "#c62828", "\u2717", 3),
    ERROR: StatusStyle("#bdbdbd", "#212121", "!", 4),
})
UNKNOWN_STYLE = StatusStyle("#eeeeee", "#757575", "?", 5)
VERDICT_COLOURS = MappingProxyType({"pass": "#2e7d32", "fail": "#c62828", "error": "#e65100"})
TIER_COLOURS = MappingProxyType({"device": "#1565c0", "host": "#00897b", "storage": "#8e24aa"})
OTHER_TIER_COLOUR = "#757575"

REQUEST_ID = re.compile(r"^g(\d+)/b(\d+)/t(\d+)$")


# ---------------------------------------------------------------------------------------------
# Public API


def render_html(report: dict[str, Any]) -> str:
    """The whole page for one report document (a plain report, a matrix report, or both)."""
    matrix = report.get("matrix") if isinstance(report.get("matrix"), dict) else None
    parts = [page_banner(report, matrix)]
    if matrix is not None:
        parts.append(matrix_section(matrix))
    if matrix is None or has_own_results(report):
        parts.append(report_body(report, prefix="r-"))
    if matrix is not None:
        parts.extend(matrix_profile_sections(matrix))
    title = f"golden-replay {verdict_of(report, matrix)}: {report.get('golden') or ''}"
    return page(title, "\n".join(parts))


def write_html(report: dict[str, Any], path: str | Path) -> None:
    """Render and write the page (UTF-8)."""
    Path(path).write_text(render_html(report), encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Small helpers: escaping, numbers, ids


def esc(value: Any) -> str:
    """Every piece of report text goes through here (report fields come from servers)."""
    return html.escape(str(value), quote=True)


def as_float(value: Any) -> float | None:
    """A report number as a float: JSON numbers, and the strings "nan"/"inf"/"-inf" that the
    report writes for non-finite values. None when absent or not a number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float, str)):
        try:
            return float(value)
        except (ValueError, OverflowError):
            return None
    return None


def fmt(value: Any) -> str:
    """A value as the report wrote it (floats keep their round-trip repr), escaped."""
    if value is None:
        return "\u2014"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return esc(repr(value))
    if isinstance(value, (dict, list)):
        return esc(json.dumps(value, sort_keys=True))
    return esc(value)


def slug(text: str) -> str:
    """A fragment-safe anchor id, one-to-one (two request ids never share an anchor):
    "g0/b1/t2" -> "g0-b1-t2"; any other character becomes _hex_."""
    return "".join(c if c.isascii() and c.isalnum() else "-" if c == "/" else f"_{ord(c):x}_"
                   for c in text) or "_"


def anchor(prefix: str, request: dict[str, Any]) -> str:
    return f"{prefix}req-{slug(str(request.get('id')))}-r{int_or(request.get('repeat'), 0)}"


def style_of(status: Any) -> StatusStyle:
    return STATUS_STYLES.get(str(status), UNKNOWN_STYLE)


def parse_request_id(request_id: str) -> tuple[int, int, int] | None:
    """(group, branch, turn) from "g{group}/b{branch}/t{turn}", None for any other id."""
    m = REQUEST_ID.match(request_id)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def verdict_of(report: dict[str, Any], matrix: dict[str, Any] | None = None) -> str:
    """The report's verdict; a matrix without one is as bad as its worst profile."""
    verdict = report.get("verdict")
    if is_verdict(verdict):
        return str(verdict)
    if matrix:
        sub = [verdict_of(r) for r in dict_field(matrix, "reports").values()
               if isinstance(r, dict)]
        for worst in ("error", "fail"):
            if worst in sub:
                return worst
        return "pass" if sub else "error"
    return "error"


def is_verdict(value: Any) -> bool:
    return isinstance(value, str) and value in VERDICT_COLOURS


def has_own_results(report: dict[str, Any]) -> bool:
    return bool(report.get("requests") or report.get("summary") or report.get("error"))


def summary_of(report: dict[str, Any]) -> dict[str, Any]:
    """The summary, or {} for an error report (where it is null)."""
    s = report.get("summary")
    return s if isinstance(s, dict) else {}


def dict_field(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """A field that should be an object; {} when absent, null or anything else."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def list_field(obj: dict[str, Any], key: str) -> list[Any]:
    """A field that should be an array; [] when absent, null or anything else."""
    value = obj.get(key)
    return value if isinstance(value, list) else []


def requests_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in list_field(report, "requests") if isinstance(r, dict)]


def repeats_of(report: dict[str, Any]) -> int:
    summary = summary_of(report)
    declared = int_or(summary.get("repeats"), 1)
    seen = {int_or(r.get("repeat"), 0) for r in requests_of(report)}
    return max(declared, len(seen), 1)


def ordered_ids(requests: Iterable[dict[str, Any]]) -> list[str]:
    """Request ids in first-seen order (the golden's order)."""
    return list(dict.fromkeys(str(r.get("id")) for r in requests))


def worst(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The entry that decides a request's colour over repeats: the first failing one of the
    worst status, else the first."""
    failing = [e for e in entries if not e.get("passed", True)] or list(entries)
    return max(failing, key=lambda e: style_of(e.get("status")).rank)


def by_id(requests: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for r in requests:
        grouped.setdefault(str(r.get("id")), []).append(r)
    return grouped


# ---------------------------------------------------------------------------------------------
# Page frame


CSS = """
:root{--fg:#1f2328;--muted:#57606a;--line:#d0d7de;--bg:#ffffff;--panel:#f6f8fa}
*{box-sizing:border-box}
body{margin:0;padding:20px 28px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,
"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
h1{font-size:20px;margin:0}
h2{font-size:16px;margin:0 0 10px 0;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:0 0 8px 0}
code,.mono,td.num{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px}
.banner{display:flex;align-items:center;gap:22px;padding:14px 18px;border-radius:8px;
color:#fff;margin-bottom:14px}
.banner .verdict{font-size:40px;font-weight:800;letter-spacing:2px;line-height:1}
.banner .what{font-size:13px;opacity:.95}
.banner .what b{font-size:15px}
.stats{display:flex;flex-wrap:wrap;gap:8px;margin:0 0 14px 0}
.stat{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:6px 10px;
min-width:96px}
.stat .k{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.4px}
.stat .v{font-size:18px;font-weight:600}
.stat.bad .v{color:#c62828}
.alert{border-left:5px solid #c62828;background:#fdecea;padding:8px 12px;margin:0 0 12px 0;
border-radius:4px;white-space:pre-wrap;overflow-wrap:anywhere}
.alert.error{border-color:#e65100;background:#fff3e0}
.row{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start;margin-bottom:16px}
.row>.card{flex:1 1 480px;margin-bottom:0}
.row>.card.fit{flex:0 1 auto;max-width:100%}
.pair{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:8px}
.card{border:1px solid var(--line);border-radius:8px;padding:12px 14px;background:#fff;
min-width:0;margin-bottom:16px}
.scroll{overflow-x:auto}
table{border-collapse:collapse}
th,td{padding:3px 8px;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top}
th{font-size:12px;color:var(--muted);font-weight:600}
tr.differs td{background:#fff8c5}
td.num{text-align:right}
.kv td:first-child{color:var(--muted);white-space:nowrap}
.fp td{max-width:340px;overflow-wrap:break-word}
.legend{display:flex;flex-wrap:wrap;gap:12px;font-size:12px;color:var(--muted);margin:4px 0 8px}
.sw{display:inline-block;width:12px;height:12px;border-radius:3px;vertical-align:-2px;
margin-right:4px;border:1px solid rgba(0,0,0,.35)}
.pill{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;
border:1px solid}
mark{background:#ffd33d;color:#000;border-radius:2px;padding:0 1px}
.req{border-left:5px solid #c62828}
.req .meta{color:var(--muted);font-size:12.5px;margin-bottom:8px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:12px}
.cells td,.cells th{padding:0;border:1px solid #fff;text-align:center}
.cells td{width:22px;height:22px;font-size:12px;font-weight:700}
.cells td a{display:block;color:inherit;text-decoration:none;line-height:22px}
.cells th.v{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:500;padding:4px 0;
font-family:"DejaVu Sans Mono",Menlo,monospace;font-size:11px;height:78px}
.cells th.row{text-align:right;padding:0 8px;white-space:nowrap}
.cells td.sum{width:auto;padding:0 8px;font-weight:500;color:var(--muted);text-align:left;
white-space:nowrap}
.only-failing .allok{display:none}
.muted{color:var(--muted)}
details>summary{cursor:pointer;color:var(--muted);margin:6px 0}
details.profile>summary{font-size:16px;color:var(--fg);font-weight:600}
pre{background:var(--panel);padding:8px;border-radius:6px;overflow:auto;max-height:360px;
font-size:12px}
.topk td.diff{background:#fde2e1}
.tip{font-size:12px;color:var(--muted)}
svg text{font-family:"DejaVu Sans",system-ui,sans-serif}
svg .mono{font-family:"DejaVu Sans Mono",monospace}
"""

JS = """
(function(){
  var root=document.documentElement;
  var boxes=document.querySelectorAll('input.only-failing-toggle');
  Array.prototype.forEach.call(boxes,function(box){
    box.parentNode.hidden=false;
    var target=document.getElementById(box.getAttribute('data-target'));
    box.addEventListener('change',function(){
      if(target){target.classList.toggle('only-failing',box.checked);}
    });
  });
  var failing=Array.prototype.slice.call(document.querySelectorAll('section.req'));
  var at=-1;
  document.addEventListener('keydown',function(e){
    if(!failing.length||e.ctrlKey||e.metaKey||e.altKey){return;}
    if(e.key==='n'){at=Math.min(at+1,failing.length-1);}
    else if(e.key==='p'){at=Math.max(at-1,0);}
    else{return;}
    failing[at].scrollIntoView({block:'start'});
  });
  var hint=document.getElementById('keys-hint');
  if(hint&&failing.length){hint.hidden=false;}
  root.setAttribute('data-js','ready');
})();
"""


def page(title: str, body: str) -> str:
    """The document: no external resource of any kind, and a CSP that forbids them anyway."""
    csp = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{esc(csp)}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        "<meta name=\"referrer\" content=\"no-referrer\">\n"
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"{body}\n<script>{JS}</script>\n</body>\n</html>\n"
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


# ---------------------------------------------------------------------------------------------
# One report's body (also used for each matrix profile)


def report_body(report: dict[str, Any], prefix: str) -> str:
    """Everything about one replay, anchors prefixed so that matrix profiles never collide."""
    parts = [alerts(report, prefix), stats(report, prefix)]
    requests = requests_of(report)
    tree = tree_card(requests, prefix) if requests else ""
    parts.append(f"<div class=\"row\">{tree}{fingerprint_card(report, prefix)}</div>")
    summary = summary_of(report)
    parts.append(f"<div class=\"row\">{histogram_card(report, prefix)}"
                 f"{run_card(report, summary, prefix)}</div>")
    if repeats_of(report) > 1 and requests:
        parts.append(repeat_grid_card(requests, prefix))
    parts.append(failing_table_card(requests, prefix))
    parts.append(failing_details(requests, prefix))
    return "\n".join(p for p in parts if p)


def alerts(report: dict[str, Any], prefix: str) -> str:
    out = []
    if report.get("error"):
        out.append(f"<div class=\"alert error\" id=\"{prefix}error\"><b>error:</b> "
                   f"{esc(report['error'])}</div>")
    if report.get("tier_problem"):
        out.append(f"<div class=\"alert\" id=\"{prefix}tier-problem\"><b>cache tier:</b> "
                   f"{esc(report['tier_problem'])}</div>")
    return "".join(out)


def stats(report: dict[str, Any], prefix: str) -> str:
    """The summary numbers as cards; the ones that explain a failure are shown in red."""
    s = report.get("summary")
    if not isinstance(s, dict):
        return ""
    failed = s.get("requests_failed") or 0
    cards = [
        ("requests", s.get("requests"), False),
        ("repeats", s.get("repeats"), False),
        ("repeats failed", s.get("repeats_failed"), bool(s.get("repeats_failed"))),
        ("tokens compared", s.get("tokens_compared"), False),
        ("failed", failed, bool(failed)),
        ("diverged", s.get("requests_diverged"), bool(s.get("requests_diverged"))),
        ("cache misses", s.get("cache_misses"), bool(s.get("cache_misses"))),
        ("max ulp", s.get("max_ulp"), s.get("max_ulp") not in (0, None)),
        ("mean kl", s.get("mean_kl"), as_float(s.get("mean_kl")) not in (0.0, None)),
    ]
    if "requests_not_comparable" in s:
        cards.append(("not comparable", s.get("requests_not_comparable"), False))
    html_cards = "".join(
        f"<div class=\"stat{' bad' if bad else ''}\"><div class=\"k\">{esc(k)}</div>"
        f"<div class=\"v\">{fmt(v)}</div></div>" for k, v, bad in cards)
    return f"<div class=\"stats\" id=\"{prefix}summary\">{html_cards}</div>"


def run_card(report: dict[str, Any], summary: dict[str, Any], prefix: str) -> str:
    """Settings of the run and where the cached tokens came from."""
    rows = [("golden", report.get("golden")), ("server", report.get("server")),
            ("policy", report.get("policy")), ("expect cache", report.get("expect_cache")),
            ("require tier", report.get("require_tier")), ("repeats", summary.get("repeats")),
            ("schema", report.get("schema"))]
    shard = report.get("shard") or dict_field(report, "golden_meta").get("shard")
    optional = [("shard", shard), ("profile", report.get("profile")),
                ("server log", report.get("server_log"))]
    rows += [(k, v) for k, v in optional if v]
    table = "".join(f"<tr><td>{esc(k)}</td><td>{fmt(v)}</td></tr>" for k, v in rows)
    tiers = dict_field(summary, "cached_tokens_by_tier")
    return (f"<div class=\"card\" id=\"{prefix}run\"><h2>Run</h2><table class=\"kv\">{table}"
            "</table><h3 style=\"margin-top:12px\">Cached tokens by tier</h3>"
            f"{tier_bar_svg(tiers, prefix)}</div>")


# ---------------------------------------------------------------------------------------------
# Fingerprints


FINGERPRINT_SERVER_KEYS = ("page_size", "disable_radix_cache", "enable_hierarchical_cache")
FINGERPRINT_LATER_KEYS = ("mamba_track_interval", "disable_overlap_schedule",
                          "enable_deterministic_inference", "attention_backend", "sampling_backend",
                          "dtype", "kv_cache_dtype", "tp_size", "dp_size", "pp_size",
                          "mem_fraction_static", "max_running_requests", "chunked_prefill_size",
                          "version")


def fingerprint_rows(golden: dict[str, Any], server: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, golden value, replay-server value) for the fields that explain a difference."""
    g_info, s_info = dict_field(golden, "server_info"), dict_field(server, "server_info")
    g_model, s_model = dict_field(golden, "model_info"), dict_field(server, "model_info")
    rows: list[tuple[str, Any, Any]] = [
        ("server_url", golden.get("server_url"), server.get("server_url")),
        ("model_path", g_model.get("model_path") or g_info.get("model_path"),
         s_model.get("model_path") or s_info.get("model_path")),
        ("tool", golden.get("tool"), server.get("tool")),
        ("created", golden.get("created"), server.get("created")),
        ("api", golden.get("api"), server.get("api")),
        ("platform", platform_line(golden.get("platform")),
         platform_line(server.get("platform"))),
    ]
    hicache = sorted(k for k in {*g_info, *s_info} if str(k).startswith("hicache_"))
    for key in (*FINGERPRINT_SERVER_KEYS, *hicache, *FINGERPRINT_LATER_KEYS):
        if key in g_info or key in s_info or key in FINGERPRINT_SERVER_KEYS:
            rows.append((key, g_info.get(key), s_info.get(key)))
    return rows


def platform_line(platform: Any) -> str | None:
    if not isinstance(platform, dict) or not platform:
        return None
    keys = ("python", "system", "release", "machine", "processor")
    return " \u00b7 ".join(str(platform[k]) for k in keys if platform.get(k))


def fingerprint_card(report: dict[str, Any], prefix: str) -> str:
    """Golden and replay server side by side; rows that differ are highlighted."""
    golden = dict_field(report, "golden_meta")
    server = dict_field(report, "server_meta")
    if not golden and not server:
        return (f"<div class=\"card\" id=\"{prefix}fingerprints\"><h2>Fingerprints</h2>"
                "<p class=\"muted\">This report carries no golden or server metadata.</p></div>")
    rows = []
    for key, g, s in fingerprint_rows(golden, server):
        differs = key not in ("created", "server_url") and g != s
        cls = " class=\"differs\"" if differs else ""
        rows.append(f"<tr{cls}><td>{esc(key)}</td>"
                    f"<td>{fmt(g)}</td><td>{fmt(s)}</td></tr>")
    raw = ("<details><summary>full server_info</summary><div class=\"pair\">"
           + "".join(f"<pre>{esc(json.dumps(dict_field(side, 'server_info'), indent=1))}</pre>"
                     for side in (golden, server))
           + "</div></details>")
    return (
        f"<div class=\"card\" id=\"{prefix}fingerprints\"><h2>Fingerprints</h2>"
        "<div class=\"scroll\"><table class=\"kv fp\"><tr><th>field</th>"
        f"<th>golden (reference)</th><th>replay server</th></tr>{''.join(rows)}</table></div>"
        "<div class=\"tip\">highlighted: the two sides differ (some differences are the point, "
        f"e.g. the cache settings)</div>{raw}</div>"
    )


# ---------------------------------------------------------------------------------------------
# Conversation tree


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


# ---------------------------------------------------------------------------------------------
# Cache-hit histogram and tiers


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


def int_or(value: Any, default: int) -> int:
    """An int field of a hand-edited or foreign report, tolerated when it is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def positive_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


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


# ---------------------------------------------------------------------------------------------
# Repeat grid and matrix grid


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


# ---------------------------------------------------------------------------------------------
# Failing requests


def failing(requests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in requests if not r.get("passed", True)]


def failing_table_card(requests: Sequence[dict[str, Any]], prefix: str) -> str:
    bad = failing(requests)
    if not bad:
        if requests:
            return (f"<div class=\"card\" id=\"{prefix}failing\"><h2>Failing requests</h2>"
                    "<p class=\"muted\">None: every request passed.</p></div>")
        return ""
    rows = []
    for r in bad:
        f = dict_field(r, "first_divergence")
        style = style_of(r.get("status"))
        rows.append(
            f"<tr><td class=\"mono\"><a href=\"#{esc(anchor(prefix, r))}\">{esc(r.get('id'))}</a>"
            f"</td><td class=\"num\">{fmt(r.get('repeat'))}</td><td><span class=\"pill\" "
            f"style=\"background:{style.fill};color:{style.stroke}\">{esc(r.get('status'))}"
            f"</span></td><td class=\"num\">{fmt(f.get('position'))}</td>"
            f"<td>{fmt(f.get('kind'))}</td><td class=\"num\">{fmt(f.get('ulp'))}</td>"
            f"<td class=\"num\">{fmt(r.get('cached_tokens'))}</td>"
            f"<td class=\"num\">{fmt(r.get('expected_min_cached'))}</td>"
            f"<td>{fmt(r.get('cache_problem'))}</td></tr>")
    return (f"<div class=\"card\" id=\"{prefix}failing\"><h2>Failing requests "
            f"({len(bad)})</h2><div class=\"scroll\"><table><tr><th>request</th><th>repeat</th>"
            "<th>status</th><th>first pos</th><th>kind</th><th>ulp</th><th>cached</th>"
            f"<th>expected \u2265</th><th>cache problem</th></tr>{''.join(rows)}</table>"
            "</div></div>")


def failing_details(requests: Sequence[dict[str, Any]], prefix: str) -> str:
    bad = failing(requests)
    sections = [request_section(r, prefix) for r in bad[:MAX_DETAILED]]
    if len(bad) > MAX_DETAILED:
        sections.append(f"<p class=\"muted\">{len(bad) - MAX_DETAILED} more failing requests are "
                        "listed in the table above but not drawn.</p>")
    return "\n".join(sections)


def request_section(r: dict[str, Any], prefix: str) -> str:
    """One failing request: what diverged first, the deltas by position, the top-k there."""
    style = style_of(r.get("status"))
    detail = dict_field(r, "detail")
    first = dict_field(r, "first_divergence")
    marker = int_or(first.get("position"), -1)
    meta = " \u00b7 ".join((
        f"repeat {fmt(r.get('repeat'))}", f"{fmt(r.get('tokens_compared'))} tokens compared",
        f"max ulp {fmt(r.get('max_ulp'))}", f"mean kl {fmt(r.get('mean_kl'))}",
        f"cached {fmt(r.get('cached_tokens'))} {fmt(dict_field(r, 'cached_tokens_details'))}",
        f"expected \u2265 {fmt(r.get('expected_min_cached'))}"))
    parts = [f"<section class=\"card req\" id=\"{esc(anchor(prefix, r))}\" "
             f"data-status=\"{esc(r.get('status'))}\" style=\"border-left-color:{style.stroke}\">"
             f"<h3><span class=\"mono\">{esc(r.get('id'))}</span> <span class=\"pill\" "
             f"style=\"background:{style.fill};color:{style.stroke}\">{esc(r.get('status'))}"
             f"</span></h3><div class=\"meta\">{meta}</div>"]
    if r.get("cache_problem"):
        parts.append(f"<div class=\"alert\" style=\"border-color:#5e35b1;background:#ede7f6\">"
                     f"<b>cache:</b> {esc(r['cache_problem'])}</div>")
    if first:
        parts.append(first_divergence_table(first))
    abs_delta, ulps = list_field(detail, "abs_delta"), list_field(detail, "ulp")
    if abs_delta or ulps:
        parts.append("<div class=\"charts\">"
                     + position_chart("|\u0394 logprob| by output position", abs_delta, marker,
                                      "abs-delta")
                     + position_chart("ULP distance by output position", ulps, marker, "ulp",
                                      integers=True)
                     + "</div>")
    if isinstance(detail.get("top_k"), dict):
        parts.append(top_k_table(detail["top_k"]))
    parts.append("</section>")
    return "".join(parts)


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


# ---------------------------------------------------------------------------------------------
# Per-position charts


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
