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
    fault: str = typer.Option(None, "--fault", help="Inject one cache bug (see docs/faults.md).", show_default=False),
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
    """Run `python -m replay.sglang_frontend` in the foreground (it finds SGLang's venv itself)."""
    import subprocess
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
    try:
        return subprocess.call(argv)
    except KeyboardInterrupt:
        return 0


def demo(
    out: Path = typer.Option(Path("demo-out"), "--out", help="Directory for the golden and the reports."),
    scenario: str = typer.Option("hicache-branching", "--scenario", help="Preset name or TOML file."),
    replay_profile: str = typer.Option("hicache", "--replay-profile", help="Engine profile to replay against."),
    fault: str = typer.Option(None, "--fault", help="Inject a cache bug into the replay server to see it caught.", show_default=False),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """The whole loop on the embedded engine: serve `reference`, record, serve `hicache`
    (host tier, overlap scheduling), replay, report. Exit 0 pass, 1 fail, 2 error."""
    from golden_cli import render
    from golden_cli.options import progress_bars
    from golden_cli.replay_cmd import replay_and_report
    from replay.server.transport import ClientOptions
    from replay.run.replayer import ReplayOptions
    from replay.golden.scenario import build_plan, load_scenario
    from replay.jobs.session import record_golden
    from replay.server.target import ServerTarget

    engine_modules()  # a clear error now if torch is missing
    spec = load_scenario(scenario)
    out.mkdir(parents=True, exist_ok=True)
    golden_path = out / f"{safe_name(spec.name)}.zarr"
    logs = out / "logs"
    copts = ClientOptions(concurrency=16)

    render.err.print(f"1/3 recording {spec.name} ({spec.requests} requests) on a `reference` "
                     "engine (radix cache off, overlap off)", markup=False)
    record_golden(build_plan(spec), golden_path,
                  ServerTarget(profile="embedded-reference", log_dir=logs), client=copts,
                  api="sglang", force=True, progress=progress_bars(quiet))
    render.err.print(f"2/3 wrote {golden_path}", markup=False)
    render.err.print(f"3/3 replaying on an `{replay_profile}` engine"
                     + (f" with fault {fault}" if fault else ""), markup=False)
    target = ServerTarget(profile=f"embedded-{replay_profile}", log_dir=logs, fault=fault)
    code = replay_and_report(golden_path, target, ReplayOptions(), copts, api="sglang",
                             shard=None, quiet=quiet, report=out / "report.json",
                             junit=out / "junit.xml", html=out / "report.html")
    render.err.print(f"reports: {out / 'report.json'}, {out / 'report.html'}; server logs: {logs}",
                     markup=False)
    raise typer.Exit(code)


def safe_name(name: str) -> str:
    """A scenario name as one harmless file-name component (a name is user text: `../x` must
    not write outside --out)."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".")
    return cleaned or "scenario"
