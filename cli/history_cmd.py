"""`golden history`: the results history, every report kept over time (docs/history.md).

    golden --history h.sqlite replay ...            # (or GOLDEN_HISTORY=...) adds each report
    golden history add REPORT.json...               # reports made elsewhere (merged CI shards)
    golden history [--golden G] [--json]            # the runs, newest first
    golden history show GOLDEN [--json]             # timeline, flake rates, bisect, coverage
    golden history page --out DIR                   # DIR/index.html with the plots
    golden history prune --before 2026-06-01        # retention: delete older runs

The history is `--db`, else `golden --history`, else GOLDEN_HISTORY: a file path (SQLite) or a
postgresql:// URL; default golden-history.sqlite (an empty one is an error, never the default).
Exit codes: 0 done, 2 error (a refused report adds nothing).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from cli.options import HISTORY_ENV, exits_cleanly, global_settings

app = typer.Typer(
    help="The results history: verdicts, flake rates and hit coverage per server version, over time (docs/history.md).",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

DbOpt = typer.Option(None, "--db", show_default=False,
                     help=f"The history: a file (SQLite) or a postgresql:// URL (else golden --history, else {HISTORY_ENV}; default golden-history.sqlite).")
JsonOpt = typer.Option(False, "--json", help="Print the JSON document (for scripts) instead of lines.")


def _where(ctx: typer.Context, db: str | None) -> str:
    from replay.history.commands import DEFAULT_HISTORY
    from replay.utils.errors import UsageError

    parent = ctx.parent.params.get("db") if ctx.parent is not None else None
    given = db if db is not None else parent
    if given is not None and not given.strip():
        raise UsageError("--db is empty (an unset variable?): give a history file or database "
                         "URL, or leave it out for golden-history.sqlite")
    return given if given is not None else (global_settings().history or DEFAULT_HISTORY)


def _print_json(doc: Any) -> None:
    typer.echo(json.dumps(doc, indent=1))


def runs(
    ctx: typer.Context,
    db: str = DbOpt,
    golden: str = typer.Option(None, "--golden", help="Only the runs of this golden (a path, name or digest prefix).", show_default=False),
    limit: int = typer.Option(50, "--limit", help="At most this many runs, newest first."),
    json_out: bool = JsonOpt,
) -> None:
    """List the runs in the history, newest first."""
    if ctx.invoked_subcommand is not None:
        return
    from replay.history.commands import list_runs
    from replay.utils.errors import UsageError

    if limit < 1:
        raise UsageError("--limit must be at least 1")
    found = list_runs(_where(ctx, db), limit=limit, golden=golden)
    if json_out:
        _print_json(found)
        return
    for r in found:
        where = f" shard {r['shard']}" if r["shard"] else (" merged" if r["merged"] else "")
        server = f"profile {r['profile']}" if r["profile"] else r["server"]
        typer.echo(f"{r['at']}  {r['verdict']:<5}  {r['golden']}  {r['golden_key'].split(':')[-1][:12]}"
                   f"  {r['server_version']}  {server}  flags {r['flags']}"
                   f"  {r['requests_failed']}/{r['requests']} failed{where}")
    if not found:
        typer.echo("no runs")


def add(
    ctx: typer.Context,
    reports: list[Path] = typer.Argument(..., metavar="REPORT.json...", help="Reports written by `golden replay --report` (or merged, or a matrix)."),
    db: str = DbOpt,
) -> None:
    """Add reports made elsewhere (e.g. merged CI shards); a report already held is one run."""
    from replay.history.commands import add_files

    done = add_files(_where(ctx, db), reports)
    typer.echo(f"added {done.added} run(s), {done.duplicates} already in the history")


def show(
    ctx: typer.Context,
    golden: str = typer.Argument(..., metavar="GOLDEN", help="A golden directory, its name in reports, or a digest prefix."),
    db: str = DbOpt,
    json_out: bool = JsonOpt,
    top: int = typer.Option(10, "--top", help="Requests to list, most unstable first."),
) -> None:
    """One golden's verdict timeline, flake rate per request, first failing server version,
    and the cache-hit lengths and tiers covered."""
    from replay.history.commands import show as history_show

    doc = history_show(_where(ctx, db), golden)
    if json_out:
        _print_json(doc)
        return
    for line in show_lines(doc, top):
        typer.echo(line)


def show_lines(doc: dict[str, Any], top: int) -> list[str]:
    verdicts = ", ".join(f"{n} {v}" for v, n in sorted(doc["verdicts"].items()))
    lines = [f"{', '.join(doc['names'])}: {doc['runs']} run(s) ({verdicts})", "timeline:"]
    lines += [f"  {r['at']}  {r['verdict']:<5}  {r['server_version']}  "
              + (f"profile {r['profile']}  " if r["profile"] else "")
              + f"flags {r['flags']}  {r['requests_failed']}/{r['requests']} failed"
              + (f"  shard {r['shard']}" if r["shard"] else "  merged" if r["merged"] else "")
              for r in doc["timeline"][-20:]]
    lines.append("server versions:")
    for v in doc["versions"]:
        rate = "-" if v["fail_rate"] is None else f"{v['fail_rate']:.0%}"
        flake = "-" if v["flake_rate"] is None else f"{v['flake_rate']:.0%}"
        lines.append(f"  {v['version']}: {v['runs']} run(s), {v['pass']} pass, {v['fail']} fail, "
                     f"{v['error']} error; fail rate {rate}, flaky requests {v['flaky_requests']} ({flake})")
    lines.append(f"bisect: {doc['bisect']['note']}")
    lines.append("requests (most unstable first):")
    for r in doc["requests"][:top]:
        lines.append(f"  {r['id']}: failed {r['failed']}/{r['observed']} ({r['fail_rate']:.0%}), "
                     f"{r['flips']} flip(s){', flaky' if r['flaky'] else ''}")
    cov = doc["coverage"]
    lengths = ", ".join(f"{k}x{n}" for k, n in cov["hit_lengths"].items()) or "none"
    tiers = ", ".join(f"{t} {n}" for t, n in cov["tiers"].items()) or "none"
    lines.append(f"hit lengths covered: {lengths}")
    lines.append(f"tiers covered (tokens): {tiers}")
    for c in cov["changes"]:
        lines.append(f"  coverage changed {c['from']} -> {c['to']}: hit lengths +{c['hit_lengths_gained']} "
                     f"-{c['hit_lengths_lost']}, tiers +{c['tiers_gained']} -{c['tiers_lost']}")
    return lines


def page(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", "-o", help="The folder to write index.html into."),
    db: str = DbOpt,
    golden: str = typer.Option(None, "--golden", help="Only this golden (default: every golden, the most recent 50).", show_default=False),
) -> None:
    """Write a self-contained HTML page: verdicts and flake rates over time per server version,
    hit-length coverage, the most unstable requests (no network at view time)."""
    from replay.history.commands import write_page

    typer.echo(f"wrote {write_page(_where(ctx, db), out, golden=golden)}")


def prune(
    ctx: typer.Context,
    before: str = typer.Option(..., "--before", help="Delete the runs from before this UTC date or time (ISO, e.g. 2026-06-01)."),
    db: str = DbOpt,
) -> None:
    """Delete old runs (retention), with their outcomes and their share of the tallies."""
    from replay.history.commands import prune as history_prune

    typer.echo(f"deleted {history_prune(_where(ctx, db), before)} run(s)")


app.callback(invoke_without_command=True)(exits_cleanly(runs, listing=True))
app.command("add")(exits_cleanly(add))
app.command("show")(exits_cleanly(show, listing=True))
app.command("page")(exits_cleanly(page))
app.command("prune")(exits_cleanly(prune))
