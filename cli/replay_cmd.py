"""`golden replay`: a golden against a server, every token diffed bit for bit (one session call).

Exit codes: 0 pass, 1 fail, 2 error (no verdict); the report files say the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from cli.options import (
    ApiOpt,
    ControlOpt,
    ControlServerOpt,
    GoldenArg,
    QuietOpt,
    ShardOpt,
    progress_bars,
    takes_client_options,
    takes_replay_options,
    takes_server_target,
)

EXIT_CODES = {"pass": 0, "fail": 1}


@takes_replay_options()
@takes_client_options()
@takes_server_target()
def replay(
    golden_path: Path = GoldenArg,
    target: Any = None,  # --server or --launch and the launch options (takes_server_target)
    shard: str = ShardOpt,
    control: str = ControlOpt,
    control_server: str = ControlServerOpt,
    report: Path = typer.Option(None, "--report", help="Write the JSON report here (schema: docs/report.md).", show_default=False),
    junit: Path = typer.Option(None, "--junit", help="Write JUnit XML here (one testcase per request).", show_default=False),
    html: Path = typer.Option(None, "--html", help="Write a self-contained HTML report here.", show_default=False),
    options: Any = None,  # every replay option, one typer option each (takes_replay_options)
    client: Any = None,  # every client option (takes_client_options)
    api: str = ApiOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Replay a golden against a server and diff every token bit for bit.

    With --control (or --control-server) the same golden is replayed against a control server
    too, and each failure is said to be the tier's alone or also on the control (docs/control.md);
    the exit code stays the verdict against the golden."""
    from replay.golden.shard import parse_shard
    from replay.server.target import control_target

    if shard is not None:
        parse_shard(shard)
    twin = control_target(target, control, control_server)
    raise typer.Exit(replay_and_report(golden_path, target, options, client, api=api, shard=shard,
                                       quiet=quiet, report=report, junit=junit, html=html,
                                       control=twin))


def replay_and_report(golden_path: Path, target: Any, options: Any, copts: Any, *, api: str,
                      shard: str | None, quiet: bool, report: Path | None, junit: Path | None,
                      html: Path | None, control: Any = None) -> int:
    """Replay, write the report files, print; the exit code. Shared by replay and demo."""
    from cli import render
    from cli.options import global_settings, interruption
    from replay.report.document import report_dict
    from replay.jobs.publish import ReportFiles, publish
    from replay.report.files import remove_stale
    from replay.jobs.session import replay_golden, run_setup

    remove_stale(report, junit, html)
    files = ReportFiles(report=report, junit=junit, html=html)
    settings = global_settings()
    try:
        doc = replay_golden(golden_path, target, options, copts, api=api, shard=shard,
                            progress=progress_bars(quiet), control=control,
                            debug=settings.debug)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: still an error report
        doc = report_dict(None, golden=str(golden_path), server=target.label,
                          policy=str(options.policy), error=interruption(exc),
                          setup=run_setup(target, options, shard, client=copts))
        publish(doc, files, history=settings.history)
        raise
    from replay.jobs.minimize.repro_script import rerun_command

    doc["rerun"] = rerun_command(str(golden_path), target, options, copts, api=api, shard=shard)
    publish(doc, files, history=settings.history)
    render.print_outcome(doc)
    return EXIT_CODES.get(doc["verdict"], 2)
