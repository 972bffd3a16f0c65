"""`golden matrix`: one golden replayed against several launched server configurations.

Registered by cli/main.py as `app.command("matrix")(exits_cleanly(matrix_cmd.matrix))`.
Exit codes as for replay, over the worst profile: 0 all pass, 1 some fail, 2 some error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from cli import render
from cli.options import replay_options
from replay.client import ClientOptions
from replay.errors import UsageError
from replay.matrix import LaunchSettings, matrix_junit, run_matrix
from replay.report import write_json
from replay.shard import parse_shard

EXIT_CODES = {"pass": 0, "fail": 1}
TABLE_ROWS = 40  # beyond this many requests only the ones not passing everywhere are listed


def matrix(
    golden_path: Path = typer.Argument(..., metavar="GOLDEN", help="A golden written by `golden record`."),
    launch: list[str] = typer.Option(..., "--launch", help="A launch profile (name or TOML file); repeat for each configuration.", show_default=False),
    model: str = typer.Option(None, "--model", help="Model for profiles that need one (SGLang: a path or hub id).", show_default=False),
    attention_backend: str = typer.Option(None, "--attention-backend", help="Attention backend for SGLang profiles (default: per GPU, docs/profiles.md).", show_default=False),
    report: Path = typer.Option(None, "--report", help="Write the matrix JSON report here (docs/ci.md).", show_default=False),
    junit: Path = typer.Option(None, "--junit", help="Write JUnit XML here: one testsuite per profile.", show_default=False),
    policy: str = typer.Option("exact", "--policy", help="exact | kl:THRESHOLD | ulp:N."),
    repeat: int = typer.Option(1, "--repeat", help="Replay the whole golden N times per profile (each from an empty cache)."),
    schedule: str = typer.Option("lockstep", "--schedule", help="lockstep | interleave | dag."),
    expect_cache: str = typer.Option("auto", "--expect-cache", help="auto | none | attention | mamba:INTERVAL (auto: per server)."),
    require_tier: str = typer.Option(None, "--require-tier", help="Fail a profile unless some hits came from this tier: host | storage.", show_default=False),
    allow_model_mismatch: bool = typer.Option(False, "--allow-model-mismatch", help="Replay even if a server's model differs from the golden's."),
    allow_numerics_mismatch: bool = typer.Option(False, "--allow-numerics-mismatch", help="Replay even if a server's numerics settings differ from the reference's."),
    log_dir: Path = typer.Option(Path("golden-logs"), "--log-dir", help="Server logs go here, one PROFILE.log each."),
    shard: str = typer.Option(None, "--shard", help="Replay only shard i of n (whole groups), e.g. 2/4.", show_default=False),
    fault: str = typer.Option(None, "--fault", help="Inject this fault (embedded-engine profiles only).", show_default=False),
    server_arg: list[str] = typer.Option([], "--server-arg", help="Append one argument to every server's command line (repeat; use --server-arg=--flag=value).", show_default=False),
    concurrency: int = typer.Option(16, "--concurrency", help="Requests in flight at once."),
    timeout: float = typer.Option(900.0, "--timeout", help="Seconds allowed for one request."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output (for CI logs)."),
) -> None:
    """Replay one golden against each launch profile in turn; one report for all of them."""
    options = replay_options(policy, schedule, repeat, require_tier, expect_cache, allow_model_mismatch,
                             allow_numerics_mismatch)
    copts = client_options(concurrency, timeout)
    if shard is not None:
        parse_shard(shard)
    settings = LaunchSettings(model=model, log_dir=log_dir, fault=fault, extra_args=tuple(server_arg),
                              attention_backend=attention_backend)

    def notify(line: str) -> None:
        if not quiet:
            render.err.print(line, markup=False)

    def bar(label: str, total: int) -> Any:
        return render.progress_bar(f"replay {golden_path.name} on {label}", total, quiet)

    doc = run_matrix(golden_path, launch, options, copts, settings, shard=shard,
                     progress_bar=bar, notify=notify)
    if report:
        write_json(doc, report)
    if junit:
        junit.write_text(matrix_junit(doc))
    print_matrix(doc)
    raise typer.Exit(EXIT_CODES.get(doc["verdict"], 2))




def client_options(concurrency: int, timeout: float) -> ClientOptions:
    if concurrency < 1:
        raise UsageError("--concurrency must be >= 1")
    if timeout <= 0:
        raise UsageError("--timeout must be > 0")
    return ClientOptions(concurrency=concurrency, request_timeout=timeout)


# ---------------------------------------------------------------------------------------------
# Console
# ---------------------------------------------------------------------------------------------


def print_matrix(doc: dict[str, Any]) -> None:
    """The request x profile table (or, on a narrow terminal, one line per failing request),
    then one verdict line per profile and the matrix verdict."""
    if render.out.width >= 100:
        table = matrix_table(doc)
        if table is not None:
            render.out.print(table)
    else:
        for line in failure_lines(doc):
            render.out.print(line, markup=False)
    for line in verdict_lines(doc):
        render.out.print(line, markup=False)


def cell(request: dict[str, Any]) -> str:
    """One request's outcome in a few characters: ok, drift@POS, token@POS, top_k@POS, miss."""
    if request["passed"]:
        return "ok"
    first = request.get("first_divergence")
    if first:
        kind = {"token": "token", "logprob": "drift", "top_k": "top_k"}.get(first["kind"], first["kind"])
        return f"{kind}@{first['position']}"
    return "miss" if request["status"] == "cache_miss" else request["status"]


def matrix_table(doc: dict[str, Any], limit: int = TABLE_ROWS) -> Table | None:
    names = doc["matrix"]["profiles"]
    reports = doc["matrix"]["reports"]
    cells: dict[tuple[str, int], dict[str, str]] = {}
    for name in names:
        for r in reports[name].get("requests") or []:
            cells.setdefault((r["id"], r["repeat"]), {})[name] = cell(r)
    if not cells:
        return None
    rows = list(cells.items())
    caption = None
    if len(rows) > limit:
        rows = [(k, v) for k, v in rows if any(c != "ok" for c in v.values())]
        caption = f"{len(cells) - len(rows)} request(s) passing on every profile not shown"
    table = Table(title=f"{doc['golden']}: request x profile", caption=caption)
    table.add_column("request")
    for name in names:
        table.add_column(name)
    for (rid, rep), by_profile in rows:
        label = rid if rep == 0 else f"{rid}#{rep}"
        table.add_row(label, *(by_profile.get(n, _missing(reports[n])) for n in names))
    return table


def failure_lines(doc: dict[str, Any]) -> list[str]:
    lines = []
    for name in doc["matrix"]["profiles"]:
        lines.extend(f"{name}: {line}" for line in render.first_failure_lines(doc["matrix"]["reports"][name]))
    return lines


def verdict_lines(doc: dict[str, Any]) -> list[str]:
    names = doc["matrix"]["profiles"]
    reports = doc["matrix"]["reports"]
    lines = [f"{name}: {render.verdict_line(reports[name])}" for name in names]
    counts = {v: sum(1 for n in names if reports[n]["verdict"] == v) for v in ("pass", "fail", "error")}
    lines.append(f"MATRIX {doc['verdict'].upper()}: {len(names)} profile(s), {counts['pass']} pass, "
                 f"{counts['fail']} fail, {counts['error']} error")
    return lines


def _missing(report: dict[str, Any]) -> str:
    return "error" if report["verdict"] == "error" else "-"
