"""`golden record`: a scenario's reference outputs into a zarr golden (one session call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from cli.options import (
    NOT_FOR_A_REFERENCE,
    ApiOpt,
    CheckDeterminismOpt,
    QuietOpt,
    ReferenceOpt,
    ScheduleOpt,
    fail,
    notify_stderr,
    progress_bars,
    takes_client_options,
    takes_server_target,
)


@takes_client_options()
@takes_server_target(without=NOT_FOR_A_REFERENCE)
def record(
    target: Any = None,  # --server or --launch and the launch options (takes_server_target)
    scenario: str = typer.Option("hicache-branching", "--scenario", help="Preset name (see `golden scenarios`) or a TOML file."),
    out: Path = typer.Option(..., "--out", help="Golden to write: a NAME.zarr directory.", show_default=False),
    seed: int = typer.Option(None, "--seed", help="Override the scenario's seed.", show_default=False),
    top_k: int = typer.Option(None, "--top-k", help="Override the scenario's top-k logprobs per position.", show_default=False),
    prompt_logprobs: int = typer.Option(None, "--prompt-logprobs", help="Override the scenario's prompt_logprobs: the last N groups also ask for prompt logprobs from a warm cache (docs/scenarios.md).", show_default=False),
    salted: int = typer.Option(None, "--salted", help="Override the scenario's salted: the first N groups' requests send cache keys of their own (docs/scenarios.md).", show_default=False),
    schedule: str = ScheduleOpt,
    force: bool = typer.Option(False, "--force", help="Overwrite an existing golden."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted recording from its journal (.NAME.zarr.journal)."),
    check_determinism: int = CheckDeterminismOpt,
    reference: str = ReferenceOpt,
    client: Any = None,  # every client option (takes_client_options)
    api: str = ApiOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Record reference outputs of a scenario into a zarr golden (use a cache-disabled server,
    or --reference cached with a cached one). To re-record a directory of goldens, see
    `golden update`."""
    from replay.run.recorder import RecordOptions
    from replay.golden.scenario import build_plan, load_scenario, with_overrides
    from replay.jobs.session import NonDeterministicRecording, record_golden

    options = RecordOptions(schedule=schedule, check_determinism=check_determinism,
                            reference=reference)
    plan = build_plan(with_overrides(load_scenario(scenario), seed=seed, top_k=top_k,
                                     prompt_logprobs=prompt_logprobs, salted=salted))
    try:
        recorded = record_golden(plan, out, target, options, client, api=api, force=force,
                               resume=resume, progress=progress_bars(quiet),
                               notify=notify_stderr(quiet))
    except NonDeterministicRecording as exc:
        fail(f"refusing to write {out}: {exc}", code=1)
    from cli import render

    render.out.print(f"recorded {recorded.requests} requests, {recorded.output_tokens} output tokens from "
                     f"{target.label} into {out}", markup=False)
    if check_determinism > 1:  # a check that passed says so (one that failed refused above)
        render.out.print(f"check-determinism: {check_determinism} recordings agreed bit for bit "
                         f"on {recorded.requests} requests", markup=False)
