"""`golden`: record cache-disabled reference logprobs, replay them against a cached server,
diff every token bit for bit.

Exit codes: 0 pass, 1 fail (divergence beyond the policy, or a cache expectation unmet),
2 error (bad arguments or golden, unreachable or misbehaving server, model mismatch).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from cli import engine_cmds, matrix_cmd, profiles_cmd, render, update_cmd
from cli.options import client_options, replay_options
from cli.report_cmd import report as report_cmd
from replay import aio
from replay.apis import detect_api, get_api
from replay.client import ClientOptions, ServerClient
from replay.diff import Policy
from replay.errors import GoldenError, UsageError
from replay.fingerprint import redact_url
from replay.golden_compare import compare_goldens
from replay.golden_store import golden_summary, read_golden, verify_golden, write_golden
from replay.html_report import write_html
from replay.journal import journal_path
from replay.launch import server_for
from replay.recorder import NonDeterministicReference, RecordOptions, record
from replay.replayer import ReplayOptions, replay
from replay.report import junit_xml, report_dict, write_json
from replay.runner import check_schedule
from replay.scenario import build_plan, load_scenario, with_overrides
from replay.shard import parse_shard, shard_golden

app = typer.Typer(
    help=__doc__,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

F = TypeVar("F", bound=Callable[..., Any])


def exits_cleanly(fn: F) -> F:
    """Errors become one line on stderr and exit code 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GoldenError as exc:
            render.err.print(f"error: {exc}", markup=False)
            raise typer.Exit(2) from None
        except OSError as exc:  # a file or directory the user named cannot be used
            where = f" {exc.filename}" if exc.filename else ""
            render.err.print(f"error:{where}: {exc.strerror or exc}", markup=False)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            render.err.print("error: interrupted", markup=False)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


ServerOpt = typer.Option(None, "--server", help="Base URL of an SGLang-protocol server, e.g. http://127.0.0.1:30000.", show_default=False)
LaunchOpt = typer.Option(None, "--launch", help="Start this server profile instead of --server (see `golden profiles`).", show_default=False)
ModelOpt = typer.Option(None, "--model", help="Model path for --launch profiles that need one.", show_default=False)
AttentionOpt = typer.Option(None, "--attention-backend", help="Attention backend for --launch SGLang profiles (default: fa4 on Blackwell, fa3 on Hopper, triton elsewhere; docs/profiles.md).", show_default=False)
LogDirOpt = typer.Option(Path("golden-logs"), "--log-dir", help="Where --launch writes the server's log.")
ConcurrencyOpt = typer.Option(16, "--concurrency", help="Requests in flight at once.")
ScheduleOpt = typer.Option("lockstep", "--schedule", help="lockstep | interleave | dag (see docs/scenarios.md).")
TimeoutOpt = typer.Option(900.0, "--timeout", help="Seconds allowed for one request.")
ApiKeyOpt = typer.Option(None, "--api-key", envvar="GOLDEN_API_KEY", help="Bearer token (or GOLDEN_API_KEY); never written anywhere.", show_default=False)
QuietOpt = typer.Option(False, "--quiet", "-q", help="No progress bar (for CI logs).")
ApiOpt = typer.Option("auto", "--api", help="auto | sglang | openai | llamacpp (auto: ask the server).")


def say(line: str) -> None:
    """A launch announcement (e.g. the pinned attention backend), on stderr even with --quiet."""
    render.err.print(line, markup=False)


async def use_api(client: ServerClient, name: str, *, reference: bool = False) -> None:
    """Point the client at the server's API, detecting it when asked to. `reference`: this client
    records a reference (per-request cache switches off, see get_api)."""
    client.api = get_api(await detect_api(client) if name == "auto" else name, reference=reference)


@app.command("record")
@exits_cleanly
def record_cmd(
    server: str = ServerOpt,
    launch: str = LaunchOpt,
    model: str = ModelOpt,
    attention_backend: str = AttentionOpt,
    log_dir: Path = LogDirOpt,
    scenario: str = typer.Option("hicache-branching", "--scenario", help="Preset name (see `golden scenarios`) or a TOML file."),
    out: Path = typer.Option(None, "--out", help="Golden to write: a NAME.zarr directory.", show_default=False),
    update: Path = typer.Option(None, "--update", help="Instead: re-record every golden in this directory, print which changed, replace those (as `golden update DIR`).", show_default=False),
    seed: int = typer.Option(None, "--seed", help="Override the scenario's seed.", show_default=False),
    top_k: int = typer.Option(None, "--top-k", help="Override the scenario's top-k logprobs per position.", show_default=False),
    concurrency: int = ConcurrencyOpt,
    schedule: str = ScheduleOpt,
    force: bool = typer.Option(False, "--force", help="Overwrite an existing golden."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted recording from its journal (.NAME.zarr.journal)."),
    check_determinism: int = typer.Option(1, "--check-determinism", help="Record N times; refuse to write unless all agree bit for bit."),
    timeout: float = TimeoutOpt,
    api: str = ApiOpt,
    api_key: str = ApiKeyOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Record reference outputs of a scenario into a zarr golden (use a cache-disabled server)."""
    if update is not None:
        update_cmd.update(directory=update, server=server, launch=launch, model=model,
                          log_dir=log_dir, server_arg=[], policy="exact", dry_run=False,
                          report_dir=None, check_determinism=check_determinism,
                          schedule=schedule, concurrency=concurrency, timeout=timeout,
                          api_key=api_key, quiet=quiet, attention_backend=attention_backend)
        return
    if out is None:
        raise UsageError("give --out PATH.zarr (or --update DIR to re-record a directory)")
    if check_determinism < 1:
        raise UsageError("--check-determinism must be >= 1")
    check_schedule(schedule)
    spec = with_overrides(load_scenario(scenario), seed=seed, top_k=top_k)
    plan = build_plan(spec)
    if out.exists() and not force:
        raise UsageError(f"{out} exists; pass --force to overwrite")
    journal = journal_path(out)
    options = RecordOptions(schedule=schedule, check_determinism=check_determinism,
                            journal=journal, resume=resume)
    total = len(plan.requests) * check_determinism

    async def go(url: str) -> Any:
        async with ServerClient(url, client_options(concurrency, timeout, api_key)) as client:
            await use_api(client, api, reference=True)
            info = await client.server_info()
            if not info.get("disable_radix_cache", False):
                render.err.print("warning: the server has its radix cache on; a reference should "
                                 "be recorded with the cache disabled", markup=False)
            with render.progress_bar(f"record {spec.name}", total, quiet) as tick:
                return await record(client, plan, options, progress=tick)

    try:
        with server_for(server, launch, model, log_dir, attention_backend=attention_backend,
                        notify=say) as url:
            golden = aio.run(go(url))
    except NonDeterministicReference as exc:
        journal.unlink(missing_ok=True)
        render.err.print(f"refusing to write {out}: the reference is not deterministic: {exc}", markup=False)
        raise typer.Exit(1) from None
    path = write_golden(golden, out, force=force)
    journal.unlink(missing_ok=True)
    tokens = sum(len(r.output_ids) for r in golden.requests)
    source = redact_url(server) if server else f"profile {launch}"
    render.out.print(f"recorded {len(golden.requests)} requests, {tokens} output tokens from "
                     f"{source} into {path}", markup=False)


@app.command("replay")
@exits_cleanly
def replay_cmd(
    golden_path: Path = typer.Argument(..., metavar="GOLDEN", help="A golden written by `golden record`."),
    server: str = ServerOpt,
    launch: str = LaunchOpt,
    model: str = ModelOpt,
    attention_backend: str = AttentionOpt,
    log_dir: Path = LogDirOpt,
    shard: str = typer.Option(None, "--shard", help="Replay only shard i of n (whole groups), e.g. 2/4.", show_default=False),
    report: Path = typer.Option(None, "--report", help="Write the JSON report here (schema: docs/report.md).", show_default=False),
    junit: Path = typer.Option(None, "--junit", help="Write JUnit XML here (one testcase per request).", show_default=False),
    html: Path = typer.Option(None, "--html", help="Write a self-contained HTML report here.", show_default=False),
    policy: str = typer.Option("exact", "--policy", help="exact | kl:THRESHOLD | ulp:N."),
    repeat: int = typer.Option(1, "--repeat", help="Replay the whole golden N times (each from an empty cache)."),
    schedule: str = ScheduleOpt,
    expect_cache: str = typer.Option("auto", "--expect-cache", help="auto | none | any | attention | mamba:INTERVAL (docs/report.md)."),
    require_tier: str = typer.Option(None, "--require-tier", help="Fail unless some hits came from this tier: host | storage.", show_default=False),
    allow_model_mismatch: bool = typer.Option(False, "--allow-model-mismatch", help="Replay even if the server's model differs from the golden's."),
    allow_numerics_mismatch: bool = typer.Option(False, "--allow-numerics-mismatch", help="Replay even if the server's numerics settings (attention backend, page size, dtype...) differ from the reference's."),
    concurrency: int = ConcurrencyOpt,
    timeout: float = TimeoutOpt,
    api: str = ApiOpt,
    api_key: str = ApiKeyOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Replay a golden against a server and diff every token bit for bit."""
    options = replay_options(policy, schedule, repeat, require_tier, expect_cache,
                             allow_model_mismatch, allow_numerics_mismatch)
    if shard is not None:
        parse_shard(shard)
    if (server is None) == (launch is None):
        raise UsageError("give exactly one of --server URL or --launch PROFILE")
    code = run_replay(golden_path, server, options, client_options(concurrency, timeout, api_key),
                      report_path=report, junit_path=junit, html_path=html, quiet=quiet,
                      launch=launch, model=model, log_dir=log_dir, shard=shard, api=api,
                      attention_backend=attention_backend)
    raise typer.Exit(code)


def run_replay(golden_path: Path, server: str | None, options: ReplayOptions, copts: ClientOptions,
               *, report_path: Path | None, junit_path: Path | None, quiet: bool,
               html_path: Path | None = None, launch: str | None = None, model: str | None = None,
               log_dir: Path = Path("golden-logs"), shard: str | None = None,
               fault: str | None = None, api: str = "auto",
               attention_backend: str | None = None) -> int:
    """Replay, print, write the report files; returns the exit code. Shared by replay and demo."""
    name = str(golden_path)
    where = redact_url(server) if server else f"profile {launch}"
    try:
        golden = read_golden(golden_path)
        if shard:
            golden = shard_golden(golden, shard)
        with server_for(server, launch, model, log_dir, fault=fault,
                        attention_backend=attention_backend, notify=say) as url:
            async def go() -> Any:
                async with ServerClient(url, copts) as client:
                    await use_api(client, api)
                    total = len(golden.requests) * options.repeat
                    with render.progress_bar(f"replay {golden_path.name}", total, quiet) as tick:
                        return await replay(client, golden, name, options, progress=tick)

            result = aio.run(go())
        doc = report_dict(result, golden=name, server=where, policy=str(options.policy))
    except GoldenError as exc:
        doc = report_dict(None, golden=name, server=where, policy=str(options.policy),
                          error=str(exc))
    write_reports(doc, report_path, junit_path, html_path)
    render.print_outcome(doc)
    return {"pass": 0, "fail": 1}.get(doc["verdict"], 2)


def write_reports(doc: dict[str, Any], report_path: Path | None, junit_path: Path | None,
                  html_path: Path | None = None) -> None:
    if report_path:
        write_json(doc, report_path)
    if junit_path:
        junit_path.write_text(junit_xml(doc))
    if html_path:
        write_html(doc, html_path)


@app.command()
@exits_cleanly
def show(
    golden_path: Path = typer.Argument(..., metavar="GOLDEN"),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Summarize a golden: scenario, source, and the conversation tree."""
    summary = golden_summary(golden_path)
    if as_json:
        render.out.print(json.dumps(summary, indent=1), markup=False)
        return
    golden = read_golden(golden_path)
    render.out.print(render.golden_tree(golden, str(golden_path)))


@app.command()
@exits_cleanly
def verify(golden_path: Path = typer.Argument(..., metavar="GOLDEN")) -> None:
    """Check a golden's integrity (schema, arrays, checksums). Exit 2 if anything is wrong."""
    problems = verify_golden(golden_path)
    if problems:
        for p in problems:
            render.err.print(f"error: {golden_path}: {p}", markup=False)
        raise typer.Exit(2)
    render.out.print(f"{golden_path}: ok", markup=False)


@app.command()
@exits_cleanly
def diff(
    a: Path = typer.Argument(..., metavar="A"),
    b: Path = typer.Argument(..., metavar="B"),
    policy: str = typer.Option("exact", "--policy", help="exact | kl:THRESHOLD | ulp:N."),
    report: Path = typer.Option(None, "--report", help="Write the JSON report here.", show_default=False),
) -> None:
    """Compare two goldens of the same scenario by the replay rules (A is the reference)."""
    doc = compare_goldens(read_golden(a), read_golden(b), str(a), str(b), Policy.parse(policy))
    write_reports(doc, report, None)
    render.print_outcome(doc)
    raise typer.Exit(0 if doc["verdict"] == "pass" else 1)


@app.command()
def scenarios() -> None:
    """List the built-in scenarios and their parameters."""
    render.out.print(render.scenarios_table())


app.command("report")(report_cmd)
app.command("matrix")(exits_cleanly(matrix_cmd.matrix))
app.command("update")(exits_cleanly(update_cmd.update))
app.add_typer(profiles_cmd.app, name="profiles")
app.command("serve")(exits_cleanly(engine_cmds.serve))
app.command("demo")(exits_cleanly(engine_cmds.demo))
