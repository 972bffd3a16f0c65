"""`golden serve` and `golden demo`: the embedded reference engine (needs the `engine` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from replay.utils.errors import UsageError


def engine_modules() -> Any:
    """Import the engine lazily: the client commands must work without torch."""
    try:
        from replay.engine import faults, options, server
    except ImportError as exc:
        raise UsageError(f"the embedded engine needs torch ({exc}); install golden-replay[engine]") from None
    return options, server, faults


def engine_options(profile: str, **overrides: Any) -> Any:
    options, _, _ = engine_modules()
    try:
        return options.profile_options(profile, **overrides)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def serve(
    profile: str = typer.Option("reference", "--profile", help="reference | radix | hicache | hicache-write-back | hicache-layer-first | hicache-storage."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(30000, "--port", help="0: any free port."),
    fault: str = typer.Option(None, "--fault", help="Inject one cache bug (`golden faults` lists them with the profile each needs; docs/faults.md).", show_default=False),
    device: str = typer.Option(None, "--device", help="cpu | cuda (default cpu).", show_default=False),
    model: str = typer.Option(None, "--model", help="Model config: tiny (default), small, medium.", show_default=False),
    seed: int = typer.Option(None, "--seed", help="Weight seed (default 0).", show_default=False),
    threads: int = typer.Option(1, "--threads", help="torch CPU threads (1 is fastest for this model; bits never depend on it)."),
    frontend: str = typer.Option("engine", "--frontend", help="engine: the engine's own HTTP server; sglang: SGLang's real HTTP server with the engine as its scheduler (bash scripts/install_sglang.sh first)."),
    api_key: str = typer.Option(None, "--api-key", help="--frontend sglang only: SGLang's --api-key.", show_default=False),
) -> None:
    """Serve the embedded reference engine over SGLang's protocol until Ctrl-C."""
    if threads < 1:
        raise UsageError("--threads must be >= 1")
    if frontend not in ("engine", "sglang"):
        raise UsageError(f"--frontend must be engine or sglang, not {frontend!r}")
    if frontend == "sglang":
        raise typer.Exit(serve_sglang_frontend(profile, host, port, fault, device, model, seed, api_key))
    if api_key is not None:
        raise UsageError("--api-key needs --frontend sglang (the engine's own server has no keys)")
    _, server, _ = engine_modules()
    import torch

    torch.set_num_threads(threads)
    opts = engine_options(profile, host=host, port=port, fault=fault, device=device, model=model, seed=seed)
    try:
        server.serve(opts)
    except OSError as exc:
        raise UsageError(f"cannot serve on {host}:{port}: {exc}") from None


def serve_sglang_frontend(profile: str, host: str, port: int, fault: str | None,
                          device: str | None, model: str | None, seed: int | None,
                          api_key: str | None) -> int:
    """Become `python -m replay.sglang_frontend` (exec, so SIGTERM, SIGINT and SIGHUP reach its
    supervisor, which stops SGLang's whole process tree; it finds SGLang's venv itself)."""
    import os
    import sys

    engine_options(profile, host=host, port=port, fault=fault, model=model, seed=seed)  # checks
    if device not in (None, "cpu"):
        raise UsageError("--frontend sglang runs the engine on cpu only")
    argv = [sys.executable, "-m", "replay.sglang_frontend", "--profile", profile, "--host", host,
            "--port", str(port)]
    for flag, value in (("--fault", fault), ("--model", model), ("--seed", seed),
                        ("--api-key", api_key)):
        if value is not None:
            argv += [flag, str(value)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return 2  # not reached


def demo(
    out: Path = typer.Option(Path("demo-out"), "--out", help="Directory for the golden and the reports."),
    scenario: str = typer.Option(None, "--scenario", help="Preset name or TOML file (default hicache-branching; with --fault, ci-quick on a small device pool).", show_default=False),
    replay_profile: str = typer.Option(None, "--replay-profile", help="Engine profile to replay against (default: hicache, or the profile --fault needs: `golden faults`).", show_default=False),
    fault: str = typer.Option(None, "--fault", help="Inject a cache bug into the replay server to see it caught (`golden faults` lists them).", show_default=False),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """The whole loop on the embedded engine: serve `reference`, record, serve `hicache`
    (host tier, overlap scheduling), replay, report. With --fault, the scenario, profile and
    client concurrency are the ones that fault needs (replay/jobs/detection.py FAULT_SETUPS).
    Exit 0 pass, 1 fail, 2 error."""
    from cli import render
    from cli.options import progress_bars
    from cli.replay_cmd import replay_and_report
    from replay.jobs.detection import CI_QUICK, CI_QUICK_ENGINE, engine_flags, scenario_for, setup_for
    from replay.server.transport import ClientOptions
    from replay.run.replayer import ReplayOptions
    from replay.golden.scenario import build_plan, load_scenario
    from replay.jobs.session import record_golden
    from replay.server.target import ServerTarget

    engine_modules()  # a clear error now if torch is missing
    replay_profile = demo_profile(fault, replay_profile)
    setup = setup_for(fault)
    small_pool = fault is not None and scenario is None
    spec = load_scenario(scenario or (CI_QUICK if fault else "hicache-branching"))
    spec = scenario_for(spec, fault) if fault else spec
    engine = {**(CI_QUICK_ENGINE if small_pool else {}), **setup.engine}
    out.mkdir(parents=True, exist_ok=True)
    golden_path = out / f"{safe_name(spec.name)}.zarr"
    logs = out / "logs"
    copts = ClientOptions(concurrency=setup.concurrency)

    render.err.print(f"1/3 recording {spec.name} ({spec.requests} requests) on a `reference` "
                     "engine (radix cache off, overlap off)", markup=False)
    record_golden(build_plan(spec), golden_path,
                  ServerTarget(profile="embedded-reference", log_dir=logs), client=copts,
                  api="sglang", force=True, progress=progress_bars(quiet))
    render.err.print(f"2/3 wrote {golden_path}", markup=False)
    render.err.print(f"3/3 replaying on an `{replay_profile}` engine"
                     + (f" with fault {fault}" if fault else "")
                     + (f" ({', '.join(f'{k}={v}' for k, v in engine.items())})" if engine else ""),
                     markup=False)
    target = ServerTarget(profile=f"embedded-{replay_profile}", log_dir=logs, fault=fault,
                          extra_args=engine_flags(engine))
    code = replay_and_report(golden_path, target, ReplayOptions(), copts, api="sglang",
                             shard=None, quiet=quiet, report=out / "report.json",
                             junit=out / "junit.xml", html=out / "report.html")
    render.err.print(f"reports: {out / 'report.json'}, {out / 'report.html'}; server logs: {logs}",
                     markup=False)
    raise typer.Exit(code)


def demo_profile(fault: str | None, asked: str | None) -> str:
    """The replay profile: the one asked for, else the one the fault needs. Checked before any
    work: an unknown fault or profile is exit 2 at once, and a fault that the chosen profile or a
    replay cannot reach says so on stderr."""
    from cli import render
    from replay.jobs.detection import profile_for

    _, _, faults = engine_modules()
    try:
        faults.check_fault(fault)
    except ValueError as exc:
        raise UsageError(f"{exc}; `golden faults` lists them with the profile each needs") from None
    profile = asked or profile_for(fault)
    engine_options(profile)  # an unknown profile: exit 2 now, not after the recording
    if fault is not None and profile != profile_for(fault):
        render.err.print(f"warning: fault {fault} breaks a path of profile {profile_for(fault)}; "
                         f"on {profile} it may never fire (drop --replay-profile to use "
                         f"{profile_for(fault)})", markup=False)
    return profile


def faults_cmd() -> None:
    """List the embedded engine's injectable cache bugs and the profile each needs."""
    from cli import render

    engine_modules()
    from replay.jobs.detection import fault_catalogue

    for info in fault_catalogue():
        seen = (f" [needs a golden recorded with {' and '.join(info.needs)}; the demo records one]"
                if info.needs else "")
        render.out.print(f"{info.name}  (profile {info.profile}){seen}: {info.description}",
                         markup=False)


def safe_name(name: str) -> str:
    """A scenario name as one harmless file-name component (a name is user text: `../x` must
    not write outside --out)."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".")
    return cleaned or "scenario"
