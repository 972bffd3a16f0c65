"""`golden update DIR`: re-record every golden in DIR on purpose, showing what changed.

Registered by cli/main.py as `app.command("update")(exits_cleanly(update_cmd.update))`.
Exit codes: 0 done (changes written, or nothing changed), 1 with --dry-run when some golden would
change, 2 when some golden could not be re-recorded (or bad arguments, unreachable server).
"""

from __future__ import annotations

from pathlib import Path

import typer

from cli import render
from replay.client import ClientOptions
from replay.diff import Policy
from replay.errors import UsageError
from replay.fingerprint import redact_url
from replay.launch import server_for
from replay.recorder import RecordOptions
from replay.report import write_json
from replay.runner import check_schedule
from replay.update import (
    CHANGED,
    ERROR,
    UNCHANGED,
    UpdateOptions,
    UpdateResult,
    find_goldens,
    update_goldens,
)


def update(
    directory: Path = typer.Argument(..., metavar="DIR", help="A directory of goldens (NAME.zarr, searched recursively)."),
    server: str = typer.Option(None, "--server", help="Base URL of a running reference server.", show_default=False),
    launch: str = typer.Option(None, "--launch", help="Launch this profile instead (e.g. sglang-reference).", show_default=False),
    model: str = typer.Option(None, "--model", help="Model for profiles that need one.", show_default=False),
    attention_backend: str = typer.Option(None, "--attention-backend", help="Attention backend for SGLang profiles (default: per GPU, docs/profiles.md).", show_default=False),
    log_dir: Path = typer.Option(Path("golden-logs"), "--log-dir", help="Where a launched server writes its log."),
    server_arg: list[str] = typer.Option([], "--server-arg", help="Append one argument to the launched server's command line (repeat).", show_default=False),
    policy: str = typer.Option("exact", "--policy", help="What counts as a change: exact | kl:THRESHOLD | ulp:N."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Compare only; write nothing; exit 1 if anything would change."),
    report_dir: Path = typer.Option(None, "--report-dir", help="Write each golden's old-vs-new comparison report here as JSON.", show_default=False),
    check_determinism: int = typer.Option(1, "--check-determinism", help="Record N times; refuse a golden unless all agree bit for bit."),
    schedule: str = typer.Option("lockstep", "--schedule", help="lockstep | interleave | dag."),
    concurrency: int = typer.Option(16, "--concurrency", help="Requests in flight at once."),
    timeout: float = typer.Option(900.0, "--timeout", help="Seconds allowed for one request."),
    api_key: str = typer.Option(None, "--api-key", envvar="GOLDEN_API_KEY", help="Bearer token (or GOLDEN_API_KEY).", show_default=False),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the summary line and the changes."),
) -> None:
    """Re-record every golden in DIR against a reference server; replace the ones that changed."""
    if check_determinism < 1:
        raise UsageError("--check-determinism must be >= 1")
    check_schedule(schedule)
    if concurrency < 1 or timeout <= 0:
        raise UsageError("--concurrency must be >= 1 and --timeout > 0")
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory")
    if not find_goldens(directory):
        raise UsageError(f"no goldens (NAME.zarr) under {directory}")
    options = UpdateOptions(policy=Policy.parse(policy), dry_run=dry_run,
                            record=RecordOptions(schedule=schedule, check_determinism=check_determinism))
    copts = ClientOptions(concurrency=concurrency, request_timeout=timeout, api_key=api_key)

    def shown(result: UpdateResult) -> None:
        print_result(result, dry_run, quiet)
        if report_dir and result.report is not None:
            write_json(result.report, report_dir / f"{result.path.name}.json")

    if report_dir:
        report_dir.mkdir(parents=True, exist_ok=True)
    with server_for(server, launch, model, log_dir, extra_args=tuple(server_arg),
                    attention_backend=attention_backend,
                    notify=lambda line: render.err.print(line, markup=False)) as url:
        if not quiet:
            render.err.print(f"re-recording goldens under {directory} from {redact_url(url)}", markup=False)
        results = update_goldens(directory, url, options=options, client_options=copts, notify=shown)
    for warning in results[0].warnings if results else []:
        render.err.print(f"warning: {warning}", markup=False)
    render.out.print(summary_line(results, dry_run), markup=False)
    raise typer.Exit(exit_code(results, dry_run))


def print_result(result: UpdateResult, dry_run: bool, quiet: bool) -> None:
    if result.status == UNCHANGED:
        if not quiet:
            render.out.print(f"unchanged: {result.path}", markup=False)
        return
    if result.status == ERROR:
        render.out.print(f"error: {result.path}: {result.error}", markup=False)
        return
    doc = result.report or {}
    s = doc.get("summary") or {}
    action = "would change (not written, --dry-run)" if dry_run else "changed (replacing it)"
    render.out.print(f"{action}: {result.path}: {s.get('requests_failed', '?')} of "
                     f"{s.get('requests', '?')} request(s) differ, max ulp {s.get('max_ulp', '?')}",
                     markup=False)
    for line in render.first_failure_lines(doc, limit=10):
        render.out.print(f"  {line}", markup=False)
    not_comparable = s.get("requests_not_comparable") or []
    if not_comparable:
        render.out.print(f"  {len(not_comparable)} later request(s) not comparable (an ancestor "
                         "diverged, so their inputs differ)", markup=False)


def summary_line(results: list[UpdateResult], dry_run: bool) -> str:
    count = {k: sum(1 for r in results if r.status == k) for k in (CHANGED, UNCHANGED, ERROR)}
    verb = "would change" if dry_run else "changed and replaced"
    return (f"{len(results)} golden(s): {count[CHANGED]} {verb}, {count[UNCHANGED]} unchanged, "
            f"{count[ERROR]} error(s)")


def exit_code(results: list[UpdateResult], dry_run: bool) -> int:
    if any(r.status == ERROR for r in results):
        return 2
    if dry_run and any(r.status == CHANGED for r in results):
        return 1
    return 0
