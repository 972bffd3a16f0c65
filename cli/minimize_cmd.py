"""`golden minimize`: shrink a failing replay to the smallest repro that still fails the same way
(one library call, replay.jobs.minimize.session; the search itself is replay.jobs.minimize.search).

Exit codes: 0 a repro was written (its failure reproduced on a final rerun), 2 error (including a
start that does not fail on its rerun: flaky), 3 not reproduced (the minimized replay passed on
its final rerun: the failure is flaky or went away during the search; no repro.sh is written).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from cli.options import (
    AdminApiKeyOpt,
    ApiKeyOpt,
    ApiOpt,
    AttentionBackendOpt,
    ConcurrencyOpt,
    FaultOpt,
    GoldenArg,
    LaunchOpt,
    LogDirOpt,
    ModelOpt,
    QuietOpt,
    ServerArgOpt,
    ServerOpt,
    TimeoutOpt,
    client_options,
    notify_stderr,
    server_target,
    takes_replay_options,
)

NOT_REPRODUCED = 3  # exit code: the failure did not reproduce on the final rerun
REPEAT_HELP = "Judge each candidate by N repeats; a failure in any of them counts (flaky failures)."


@takes_replay_options(override={"repeat": typer.Option(1, "--repeat", help=REPEAT_HELP)})
def minimize(
    golden_path: Path = GoldenArg,
    out: Path = typer.Option(..., "--out", help="Directory for golden.zarr, repro.sh, minimize.json and report.json.", show_default=False),
    server: str = ServerOpt,
    launch: str = LaunchOpt,
    model: str = ModelOpt,
    attention_backend: str = AttentionBackendOpt,
    log_dir: Path = LogDirOpt,
    server_arg: list[str] = ServerArgOpt,
    fault: str = FaultOpt,
    report: Path = typer.Option(None, "--report", help="The failing replay's JSON report (saves the first replay; names the failure).", show_default=False),
    budget: str = typer.Option(None, "--budget", help="Stop after SECONDS (600, 10m) or RUNS (40runs) and keep the smallest failing replay found.", show_default=False),
    failure: str = typer.Option(None, "--failure", help="The failure class to keep: token_divergence | logprob_drift | prompt_logprob_drift | over_reported | cache_miss | tier (default: the start's most frequent).", show_default=False),
    same_tier: bool = typer.Option(False, "--same-tier", help="Also keep the cache tier of the failing hits (host/storage when any)."),
    options: Any = None,  # every replay option, one typer option each (takes_replay_options)
    concurrency: int = ConcurrencyOpt,
    timeout: float = TimeoutOpt,
    api: str = ApiOpt,
    api_key: str = ApiKeyOpt,
    admin_api_key: str = AdminApiKeyOpt,
    force: bool = typer.Option(False, "--force", help="Overwrite a non-empty --out directory."),
    quiet: bool = QuietOpt,
) -> None:
    """Shrink a failing replay to the smallest one that still fails the same way."""
    from cli import render
    from replay.jobs.minimize.search import parse_budget
    from replay.jobs.minimize.output import check_out_dir
    from replay.jobs.minimize.session import Failure, MinimizeSettings, minimize_golden

    if failure is not None:
        Failure(failure)  # a bad class is an error before any replay
    settings = MinimizeSettings(
        options=options,
        client=client_options(concurrency, timeout, api_key, admin_api_key), api=api,
        failure=failure,
        same_tier=same_tier, budget=parse_budget(budget))
    check_out_dir(out, force)
    target = server_target(server, launch, model, log_dir, fault=fault, server_arg=server_arg,
                           attention_backend=attention_backend)
    result = minimize_golden(golden_path, target, out, settings, report=report, force=force,
                             progress=notify_stderr(quiet))
    final, start = result.final, result.start
    if not result.reproduced:
        render.err.print(
            f"not reproduced: the minimized replay ({len(final.keep)} of {len(start.keep)} "
            f"requests) passed on its final rerun: the failure is flaky or went away during the "
            f"search (try --repeat N); no repro.sh written. Wrote {out}/: golden.zarr, "
            "minimize.json, report.json", markup=False)
        raise typer.Exit(NOT_REPRODUCED)
    state = "budget spent, may not be 1-minimal" if result.budget_exhausted else "1-minimal"
    flaky = (f"; flaky: failed in {result.judgement.failed_repeats} of {final.repeat} repeats"
             if result.flaky else "")
    render.out.print(
        f"minimized: {len(start.keep)} -> {len(final.keep)} requests, schedule {final.schedule}, "
        f"concurrency {final.concurrency}, repeat {final.repeat} ({state}{flaky}); "
        f"{result.replays} replays, {result.seconds:.0f}s. Wrote {out}/: golden.zarr, repro.sh, "
        "minimize.json, report.json", markup=False)
