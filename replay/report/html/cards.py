"""The small cards of one report: alerts (error, tier problem), summary numbers, the run."""

from __future__ import annotations

from typing import Any

from replay.report.html.histogram import tier_bar_svg
from replay.report.html.values import as_float, dict_field, esc, fmt, fmt_approx


def alerts(report: dict[str, Any], prefix: str) -> str:
    out = []
    if report.get("error"):
        out.append(f"<div class=\"alert error\" id=\"{prefix}error\"><b>error:</b> "
                   f"{esc(report['error'])}</div>")
    if report.get("tier_problem"):
        out.append(f"<div class=\"alert\" id=\"{prefix}tier-problem\"><b>cache tier:</b> "
                   f"{esc(report['tier_problem'])}</div>")
    if report.get("hit_problem"):
        out.append(f"<div class=\"alert\" id=\"{prefix}hit-problem\"><b>cache hits:</b> "
                   f"{esc(report['hit_problem'])}</div>")
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
    ]
    shown = [(k, fmt(v), bad) for k, v, bad in cards]
    shown.append(("mean kl", fmt_approx(s.get("mean_kl")),  # the JSON keeps the exact value
                  as_float(s.get("mean_kl")) not in (0.0, None)))
    if "requests_not_comparable" in s:
        shown.append(("not comparable", fmt(s.get("requests_not_comparable")), False))
    html_cards = "".join(
        f"<div class=\"stat{' bad' if bad else ''}\"><div class=\"k\">{esc(k)}</div>"
        f"<div class=\"v\">{v}</div></div>" for k, v, bad in shown)
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
