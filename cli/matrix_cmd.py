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


@o.takes_replay_options()
@o.takes_client_options()
@o.takes_server_target(without=("url",), many=True, override={"log_dir": typer.Option(
    Path("golden-logs"), "--log-dir", help="Server logs go here, one PROFILE.log each.")})
def matrix(
    golden_path: Path = o.GoldenArg,
    target: Any = None,  # --launch (repeated) and the launch options: one target per profile
    report: Path = typer.Option(None, "--report", help="Write the matrix JSON report here (docs/ci.md).", show_default=False),
    junit: Path = typer.Option(None, "--junit", help="Write JUnit XML here: one testsuite per profile.", show_default=False),
    html: Path = typer.Option(None, "--html", help="Write a self-contained HTML report here.", show_default=False),
    options: Any = None,  # every replay option, one typer option each (takes_replay_options)
    shard: str = o.ShardOpt,
    client: Any = None,  # every client option (takes_client_options)
    api: str = o.ApiOpt,
    quiet: bool = o.QuietOpt,
) -> None:
    """Replay one golden against each launch profile in turn; one report for all of them."""
    from dataclasses import replace

    from replay.jobs.matrix import matrix_junit, run_matrix
    from replay.jobs.publish import ReportFiles, publish
    from replay.report.files import remove_stale
    from replay.golden.shard import parse_shard

    if shard is not None:
        parse_shard(shard)
    notify = o.notify_stderr(quiet)
    targets = [replace(t, notify=notify) for t in target]
    remove_stale(report, junit, html)
    settings = o.global_settings()
    doc = run_matrix(golden_path, targets, options, client, shard=shard, api=api,
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
    """A count line per passing profile, the request x profile table of the rest (the requests
    that did not pass somewhere), whole (in a pipe at full width; on a terminal too narrow for
    the profile names, with numbered columns and a legend), one line per failing request, the
    requests that failed in some repeats, the command that reruns each profile that did not
    pass, one verdict line per profile and the matrix verdict (last). A profile's error is one
    `error: PROFILE: ...` line on stderr."""
    from cli import render
    from replay.report.views import flake_lines, fold, shell_lines

    for line in passing_lines(doc):
        render.out.print(line, markup=False)
    table = matrix_table(doc)
    if table is not None and render.out.is_terminal and not render.fits(table):
        table = matrix_table(doc, numbered=True)
        render.out.print(table)
        for i, name in enumerate(shown_profiles(doc), 1):
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
        for command in rerun_commands(reports[name]):
            for row in shell_lines(f"rerun {name}: {command}"):
                render.out.print(row, markup=False)
    for name, line in zip([*names, None], verdict_lines(doc)):
        if name is not None and reports[name]["verdict"] == "error":
            render.err.print(f"error: {name}: {reports[name]['error']}", markup=False)
        else:
            for row in fold(line):
                render.out.print(row, markup=False)


def rerun_commands(report: dict[str, Any]) -> list[str]:
    """What reruns a profile that did not pass: its `rerun`, or after a merge (`reruns`) the
    command of each of its shards that did not pass."""
    if report.get("reruns"):
        return list(report["reruns"])
    return [report["rerun"]] if report["verdict"] != "pass" and report.get("rerun") else []


def cell(request: dict[str, Any]) -> str:
    """One request's outcome in a few words: ok, where it first differs in the JUnit wording
    (`first difference at POS (KIND); tokens diverge at POS`), miss, or its status."""
    from replay.report.views import difference_phrase

    if request["passed"]:
        return "ok"
    phrase = difference_phrase(request, terse=True)
    if phrase:
        return phrase
    return "miss" if request["status"] == "cache_miss" else request["status"]


def shown_profiles(doc: dict[str, Any]) -> list[str]:
    """The profiles the table has a column for: those that did not pass (a passing one is a
    count line, `passing_lines`)."""
    reports = doc["matrix"]["reports"]
    return [n for n in doc["matrix"]["profiles"] if reports[n]["verdict"] != "pass"]


def passing_lines(doc: dict[str, Any]) -> list[str]:
    """One count line per passing profile instead of a column of `ok`s."""
    reports = doc["matrix"]["reports"]
    lines = []
    for name in doc["matrix"]["profiles"]:
        if reports[name]["verdict"] == "pass":
            n = len(reports[name].get("requests") or [])
            lines.append(f"{name}: all {n} request(s) ok")
    return lines


def matrix_table(doc: dict[str, Any], numbered: bool = False) -> Any:
    """The requests that did not pass on some profile, by the profiles that did not pass (None
    when there are none); `numbered`: columns headed 1..n instead of names (a legend follows)."""
    from rich.table import Table

    names = shown_profiles(doc)
    reports = doc["matrix"]["reports"]
    cells: dict[tuple[str, int], dict[str, str]] = {}
    for name in doc["matrix"]["profiles"]:
        for r in reports[name].get("requests") or []:
            cells.setdefault((r["id"], r["repeat"]), {})[name] = cell(r)
    if not cells or not names:
        return None
    rows = [(k, v) for k, v in cells.items() if any(v.get(n) != "ok" for n in names)]
    if not rows:
        return None
    passing = len(cells) - len(rows)
    caption = f"{passing} request(s) ok on every profile not shown" if passing else None
    table = Table(title=f"{doc['golden']}: request x profile", caption=caption)
    table.add_column("request", overflow="fold")
    for i, name in enumerate(names, 1):
        table.add_column(str(i) if numbered else name, overflow="fold")
    for (rid, rep), by_profile in rows:
        label = rid if rep == 0 else f"{rid}#{rep}"
        table.add_row(label, *(by_profile.get(n, _missing(reports[n])) for n in names))
    return table


def failure_lines(doc: dict[str, Any]) -> list[str]:
    from replay.report.views import first_failure_lines, fold

    lines = []
    for name in doc["matrix"]["profiles"]:
        for line in first_failure_lines(doc["matrix"]["reports"][name]):
            lines.extend(fold(f"{name}: {line}"))
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
