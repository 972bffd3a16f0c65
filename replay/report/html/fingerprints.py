"""The fingerprint card: golden and replay server side by side, the rows that differ marked.

A replay that fails is often a replay against another set-up (page size, HiCache settings,
attention backend); the rows chosen here are the ones that explain such a difference.
"""

from __future__ import annotations

import json
from typing import Any

from replay.report.html.values import dict_field, esc, fmt


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
