"""`golden`: record cache-disabled reference logprobs, replay them against a cached server,
diff every token bit for bit.

Exit codes: 0 pass, 1 fail (divergence beyond the policy, or a cache expectation unmet),
2 error (bad arguments or golden, unreachable or misbehaving server, model mismatch).
"""

from __future__ import annotations

import os

import typer

from cli import (
    engine_cmds,
    golden_cmds,
    history_cmd,
    matrix_cmd,
    minimize_cmd,
    profiles_cmd,
    record_cmd,
    replay_cmd,
    report_cmd,
    startup_interrupt,
    update_cmd,
)
from cli.options import DEBUG_ENV, HISTORY_ENV, GlobalSettings, exits_cleanly, fail

app = typer.Typer(
    help=__doc__,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"golden-replay {version('golden-replay')}")
        except PackageNotFoundError:
            typer.echo("golden-replay (not installed: run from a checkout)")
        raise typer.Exit(0)


@app.callback()
def main(
    ctx: typer.Context,
    debug: bool = typer.Option(False, "--debug", help=f"On an unexpected error, show the traceback (same as {DEBUG_ENV}=1)."),
    history: str = typer.Option(None, "--history", help=f"Add every report this command writes to this results history: a file or a postgresql:// URL (same as {HISTORY_ENV}=...; docs/history.md).", show_default=False),
    version: bool = typer.Option(False, "--version", callback=print_version, is_eager=True, help="Print the version and exit."),
) -> None:
    startup_interrupt.disarm()  # the command begins: its own Ctrl-C handling takes over
    ctx.obj = settings(debug, history)


def settings(debug: bool, history: str | None) -> GlobalSettings:
    """The global settings from the options, else the environment (read here, once; never
    written). An empty history location (an unset CI secret) is a usage error, not no history."""
    named = "--history"
    if history is None and HISTORY_ENV in os.environ:
        history, named = os.environ[HISTORY_ENV], HISTORY_ENV
    if history is not None and not history.strip():
        fail(f"error: {named} is empty (an unset CI secret?): give a history file or database "
             f"URL, or leave it out")
    return GlobalSettings(debug=debug or bool(os.environ.get(DEBUG_ENV)), history=history)

app.command("record")(exits_cleanly(record_cmd.record))
app.command("replay")(exits_cleanly(replay_cmd.replay))
app.command("show")(exits_cleanly(golden_cmds.show, listing=True))
app.command("verify")(exits_cleanly(golden_cmds.verify))
app.command("diff")(exits_cleanly(golden_cmds.diff))
app.command("scenarios")(exits_cleanly(golden_cmds.scenarios, listing=True))
app.command("report")(exits_cleanly(report_cmd.report))
app.command("matrix")(exits_cleanly(matrix_cmd.matrix))
app.command("update")(exits_cleanly(update_cmd.update))
app.command("minimize")(exits_cleanly(minimize_cmd.minimize))
app.add_typer(profiles_cmd.app, name="profiles")
app.add_typer(history_cmd.app, name="history")
app.command("serve")(exits_cleanly(engine_cmds.serve, signals=False))
app.command("demo")(exits_cleanly(engine_cmds.demo))
app.command("faults")(exits_cleanly(engine_cmds.faults_cmd, listing=True))
