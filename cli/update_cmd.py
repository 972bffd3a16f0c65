"""`golden update DIR`: re-record every golden in DIR on purpose, showing what changed.

Registered by cli/main.py as `app.command("update")(exits_cleanly(update_cmd.update))`.
Exit codes: 0 done (changes written, or nothing changed), 1 with --dry-run when some golden would
change, 2 when some golden could not be re-recorded (or bad arguments, unreachable server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from cli import options as o


def update(
    directory: Path = typer.Argument(..., metavar="DIR", help="A directory of goldens (NAME.zarr, searched recursively)."),
    server: str = o.ServerOpt,
    launch: str = typer.Option(None, "--launch", help="Launch this profile instead (e.g. sglang-reference).", show_default=False),
    model: str = o.ModelOpt,
    attention_backend: str = o.AttentionBackendOpt,
    log_dir: Path = o.LogDirOpt,
    server_arg: list[str] = o.ServerArgOpt,
    policy: str = typer.Option("exact", "--policy", help="What counts as a change: exact | kl:THRESHOLD | ulp:N."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Compare only; write nothing; exit 1 if anything would change."),
    allow_model_change: bool = typer.Option(False, "--allow-model-change", help="Re-record goldens even if the server serves another model than they were recorded with."),
    report_dir: Path = typer.Option(None, "--report-dir", help="Write each golden's old-vs-new comparison report here as JSON.", show_default=False),
    check_determinism: int = o.CheckDeterminismOpt,
    schedule: str = o.ScheduleOpt,
    concurrency: int = o.ConcurrencyOpt,
    timeout: float = o.TimeoutOpt,
    api: str = o.ApiOpt,
    api_key: str = o.ApiKeyOpt,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the summary line and the changes."),
) -> None:
    """Re-record every golden in DIR against a reference server; replace the ones that changed."""
    from cli import render
    from replay.judge.diff import Policy
    from replay.utils.errors import UsageError
    from replay.run.recorder import RecordOptions
    from replay.jobs.publish import ReportFiles, publish
    from replay.jobs.update import (UpdateOptions, UpdateResult, find_goldens, report_path,
                                    update_goldens)

    options = UpdateOptions(policy=Policy.parse(policy), dry_run=dry_run,
                            allow_model_change=allow_model_change,
                            record=RecordOptions(schedule=schedule, check_determinism=check_determinism))
    copts = o.client_options(concurrency, timeout, api_key)
    target = o.server_target(server, launch, model, log_dir, server_arg=server_arg,
                             attention_backend=attention_backend)
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory")
    if not find_goldens(directory):
        raise UsageError(f"no goldens (NAME.zarr) under {directory}")

    history = o.global_settings().history

    def shown(result: UpdateResult) -> None:
        print_result(result, dry_run, quiet)
        if result.report is None:
            return
        path = report_path(report_dir, directory, result.path) if report_dir else None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        publish(result.report, ReportFiles(report=path), history=history)

    if report_dir:
        report_dir.mkdir(parents=True, exist_ok=True)
    if not quiet:
        render.err.print(f"re-recording goldens under {directory} from {target.label}", markup=False)
    results = update_goldens(directory, target, options=options, client_options=copts, api=api,
                             notify=shown)
    for warning in results[0].warnings if results else []:
        render.err.print(f"warning: {warning}", markup=False)
    render.out.print(summary_line(results, dry_run), markup=False)
    raise typer.Exit(exit_code(results, dry_run))


def print_result(result: Any, dry_run: bool, quiet: bool) -> None:
    from cli import render
    from replay.report.views import first_failure_lines
    from replay.jobs.update import ERROR, UNCHANGED

    if result.status == UNCHANGED:
        if not quiet:
            render.out.print(f"unchanged: {result.path}", markup=False)
        return
    if result.status == ERROR:
        render.err.print(f"error: {result.path}: {result.error}", markup=False)
        return
    doc = result.report or {}
    s = doc.get("summary") or {}
    action = "would change (not written, --dry-run)" if dry_run else "changed (replacing it)"
    render.out.print(f"{action}: {result.path}: {s.get('requests_failed', '?')} of "
                     f"{s.get('requests', '?')} request(s) differ, max ulp {s.get('max_ulp', '?')}",
                     markup=False)
    for line in first_failure_lines(doc, limit=10):
        render.out.print(f"  {line}", markup=False)
    not_comparable = s.get("requests_not_comparable") or []
    if not_comparable:
        render.out.print(f"  {len(not_comparable)} later request(s) not comparable (an ancestor "
                         "diverged, so their inputs differ)", markup=False)


def summary_line(results: list[Any], dry_run: bool) -> str:
    from replay.jobs.update import CHANGED, ERROR, UNCHANGED

    count = {k: sum(1 for r in results if r.status == k) for k in (CHANGED, UNCHANGED, ERROR)}
    verb = "would change" if dry_run else "changed and replaced"
    return (f"{len(results)} golden(s): {count[CHANGED]} {verb}, {count[UNCHANGED]} unchanged, "
            f"{count[ERROR]} error(s)")


def exit_code(results: list[Any], dry_run: bool) -> int:
    from replay.jobs.update import CHANGED, ERROR

    if any(r.status == ERROR for r in results):
        return 2
    if dry_run and any(r.status == CHANGED for r in results):
        return 1
    return 0
