"""`golden record`: a scenario's reference outputs into a zarr golden (one session call)."""

from __future__ import annotations

from pathlib import Path

import typer

from cli.options import (
    AttentionBackendOpt,
    ApiKeyOpt,
    ApiOpt,
    CheckDeterminismOpt,
    ReferenceOpt,
    ConcurrencyOpt,
    LaunchOpt,
    LogDirOpt,
    ModelOpt,
    QuietOpt,
    ScheduleOpt,
    ServerArgOpt,
    ServerOpt,
    TimeoutOpt,
    client_options,
    fail,
    notify_stderr,
    progress_bars,
    server_target,
)


def record(
    server: str = ServerOpt,
    launch: str = LaunchOpt,
    model: str = ModelOpt,
    attention_backend: str = AttentionBackendOpt,
    log_dir: Path = LogDirOpt,
    server_arg: list[str] = ServerArgOpt,
    scenario: str = typer.Option("hicache-branching", "--scenario", help="Preset name (see `golden scenarios`) or a TOML file."),
    out: Path = typer.Option(..., "--out", help="Golden to write: a NAME.zarr directory.", show_default=False),
    seed: int = typer.Option(None, "--seed", help="Override the scenario's seed.", show_default=False),
    top_k: int = typer.Option(None, "--top-k", help="Override the scenario's top-k logprobs per position.", show_default=False),
    prompt_logprobs: int = typer.Option(None, "--prompt-logprobs", help="Override the scenario's prompt_logprobs: the last N groups also ask for prompt logprobs from a warm cache (docs/scenarios.md).", show_default=False),
    salted: int = typer.Option(None, "--salted", help="Override the scenario's salted: the first N groups' requests send cache keys of their own (docs/scenarios.md).", show_default=False),
    concurrency: int = ConcurrencyOpt,
    schedule: str = ScheduleOpt,
    force: bool = typer.Option(False, "--force", help="Overwrite an existing golden."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted recording from its journal (.NAME.zarr.journal)."),
    check_determinism: int = CheckDeterminismOpt,
    reference: str = ReferenceOpt,
    timeout: float = TimeoutOpt,
    api: str = ApiOpt,
    api_key: str = ApiKeyOpt,
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
    copts = client_options(concurrency, timeout, api_key)
    target = server_target(server, launch, model, log_dir, server_arg=server_arg,
                           attention_backend=attention_backend)
    plan = build_plan(with_overrides(load_scenario(scenario), seed=seed, top_k=top_k,
                                     prompt_logprobs=prompt_logprobs, salted=salted))
    try:
        golden = record_golden(plan, out, target, options, copts, api=api, force=force,
                               resume=resume, progress=progress_bars(quiet),
                               notify=notify_stderr(quiet))
    except NonDeterministicRecording as exc:
        fail(f"refusing to write {out}: {exc}", code=1)
    tokens = sum(len(r.output_ids) for r in golden.requests)
    from cli import render

    render.out.print(f"recorded {len(golden.requests)} requests, {tokens} output tokens from "
                     f"{target.label} into {out}", markup=False)
