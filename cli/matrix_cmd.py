"""`golden matrix`: one golden replayed against several launched server configurations.

Registered by cli/main.py as `app.command("matrix")(exits_cleanly(matrix_cmd.matrix))`.
Exit codes as for replay, over the worst profile: 0 all pass, 1 some fail, 2 some error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from cli import options as o

EXIT_CODES = {"pass": 0, "fail": 1}
TABLE_ROWS = 40  # beyond this many requests only the ones not passing everywhere are listed


@o.takes_replay_options()
def matrix(
    golden_path: Path = o.GoldenArg,
    launch: list[str] = typer.Option(..., "--launch", help="A launch profile (name or TOML file); repeat for each configuration.", show_default=False),
    model: str = o.ModelOpt,
    attention_backend: str = o.AttentionBackendOpt,
    report: Path = typer.Option(None, "--report", help="Write the matrix JSON report here (docs/ci.md).", show_default=False),
    junit: Path = typer.Option(None, "--junit", help="Write JUnit XML here: one testsuite per profile.", show_default=False),
    html: Path = typer.Option(None, "--html", help="Write a self-contained HTML report here.", show_default=False),
    options: Any = None,  # every replay option, one typer option each (takes_replay_options)
    log_dir: Path = typer.Option(Path("golden-logs"), "--log-dir", help="Server logs go here, one PROFILE.log each."),
    shard: str = o.ShardOpt,
    fault: str = o.FaultOpt,
    server_arg: list[str] = o.ServerArgOpt,
    concurrency: int = o.ConcurrencyOpt,
    timeout: float = o.TimeoutOpt,
    api: str = o.ApiOpt,
    api_key: str = o.ApiKeyOpt,
    admin_api_key: str = o.AdminApiKeyOpt,
    quiet: bool = o.QuietOpt,
) -> None:
    """Replay one golden against each launch profile in turn; one report for all of them."""
    from replay.jobs.matrix import matrix_junit, run_matrix
    from replay.jobs.publish import ReportFiles, publish
    from replay.report.files import remove_stale
    from replay.golden.shard import parse_shard

    copts = o.client_options(concurrency, timeout, api_key, admin_api_key)
    if shard is not None:
        parse_shard(shard)
    notify = o.notify_stderr(quiet)
    targets = [o.server_target(None, name, model, log_dir, fault=fault, server_arg=server_arg,
                               attention_backend=attention_backend, notify=notify)
               for name in launch]
    remove_stale(report, junit, html)
    settings = o.global_settings()
    doc = run_matrix(golden_path, targets, options, copts, shard=shard, api=api,
                     progress=o.progress_bars(quiet), notify=notify, debug=settings.debug)
    publish(doc, ReportFiles(report=report, junit=junit, html=html,
                             junit_text=matrix_junit(doc) if junit else None),
            history=settings.history)
    print_matrix(doc)
    raise typer.Exit(EXIT_CODES.get(doc["verdict"], 2))


# ---------------------------------------------------------------------------------------------
# Console
# ---------------------------------------------------------------------------------------------


def print_matrix(doc: dict[str, Any]) -> None:
    """The request x profile table, whole (in a pipe at full width; on a terminal too narrow for
    the profile names, with numbered columns and a legend), one line per failing request, the
    requests that failed in some repeats, the command that reruns each profile that did not
    pass, one verdict line per profile and the matrix verdict (last). A profile's error is one
    `error: PROFILE: ...` line on stderr."""
    from cli import render
    from replay.report.views import flake_lines

    table = matrix_table(doc)
    if table is not None and render.out.is_terminal and not render.fits(table):
        table = matrix_table(doc, numbered=True)
        render.out.print(table)
        for i, name in enumerate(doc["matrix"]["profiles"], 1):
            render.out.print(f"  {i} = {name}", markup=False)
    elif table is not None:
        render.print_whole(table)
    reports = doc["matrix"]["reports"]
    for line in failure_lines(doc):
        render.out.print(line, markup=False)
    names = doc["matrix"]["profiles"]
    for name in names:
        for line in flake_lines(reports[name]):
            render.out.print(f"{name}: {line}", markup=False)
    for name in names:
        if reports[name]["verdict"] != "pass" and reports[name].get("rerun"):
            render.out.print(f"rerun {name}: {reports[name]['rerun']}", markup=False)
    for name, line in zip([*names, None], verdict_lines(doc)):
        if name is not None and reports[name]["verdict"] == "error":
            render.err.print(f"error: {name}: {reports[name]['error']}", markup=False)
        else:
            render.out.print(line, markup=False)


def cell(request: dict[str, Any]) -> str:
    """One request's outcome in a few characters: ok, drift@POS, token@POS, top_k@POS, miss."""
    if request["passed"]:
        return "ok"
    first = request.get("first_divergence")
    if first:
        kind = {"token": "token", "logprob": "drift", "top_k": "top_k"}.get(first["kind"], first["kind"])
        return f"{kind}@{first['position']}"
    return "miss" if request["status"] == "cache_miss" else request["status"]


def matrix_table(doc: dict[str, Any], limit: int = TABLE_ROWS, numbered: bool = False) -> Any:
    """The table; `numbered`: columns headed 1..n instead of profile names (a legend follows)."""
    from rich.table import Table

    names = doc["matrix"]["profiles"]
    reports = doc["matrix"]["reports"]
    cells: dict[tuple[str, int], dict[str, str]] = {}
    for name in names:
        for r in reports[name].get("requests") or []:
            cells.setdefault((r["id"], r["repeat"]), {})[name] = cell(r)
    if not cells:
        return None
    rows = list(cells.items())
    caption = None
    if len(rows) > limit:
        rows = [(k, v) for k, v in rows if any(c != "ok" for c in v.values())]
        caption = f"{len(cells) - len(rows)} request(s) passing on every profile not shown"
    table = Table(title=f"{doc['golden']}: request x profile", caption=caption)
    table.add_column("request", overflow="fold")
    for i, name in enumerate(names, 1):
        table.add_column(str(i) if numbered else name, overflow="fold")
    for (rid, rep), by_profile in rows:
        label = rid if rep == 0 else f"{rid}#{rep}"
        table.add_row(label, *(by_profile.get(n, _missing(reports[n])) for n in names))
    return table


def failure_lines(doc: dict[str, Any]) -> list[str]:
    from replay.report.views import first_failure_lines

    lines = []
    for name in doc["matrix"]["profiles"]:
        lines.extend(f"{name}: {line}" for line in first_failure_lines(doc["matrix"]["reports"][name]))
    return lines


def verdict_lines(doc: dict[str, Any]) -> list[str]:
    names = doc["matrix"]["profiles"]
    reports = doc["matrix"]["reports"]
    from replay.report.views import verdict_line

    lines = [f"{name}: {verdict_line(reports[name])}" for name in names]
    counts = {v: sum(1 for n in names if reports[n]["verdict"] == v) for v in ("pass", "fail", "error")}
    lines.append(f"MATRIX {doc['verdict'].upper()}: {len(names)} profile(s), {counts['pass']} pass, "
                 f"{counts['fail']} fail, {counts['error']} error")
    return lines


def _missing(report: dict[str, Any]) -> str:
    return "error" if report["verdict"] == "error" else "-"
