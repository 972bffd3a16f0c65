"""`golden show | verify | diff | scenarios`: look at goldens and scenarios, no server needed."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.options import PolicyOpt, global_settings


def show(
    golden_path: Path = typer.Argument(..., metavar="GOLDEN"),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Summarize a golden: scenario, source, and the conversation tree."""
    from cli import render
    from replay.golden.store import golden_summary, read_golden

    summary = golden_summary(golden_path)
    if as_json:
        render.out.print(json.dumps(summary, indent=1), markup=False)
        return
    render.print_whole(render.golden_tree(read_golden(golden_path), str(golden_path)))


def verify(golden_path: Path = typer.Argument(..., metavar="GOLDEN")) -> None:
    """Check a golden's integrity (schema, arrays, checksums) and meaning (a conversation tree of
    log-probabilities with something to compare). Exit 2 if anything is wrong."""
    from cli import render
    from replay.golden.meaning import verify_meaning

    problems = verify_meaning(golden_path)
    if problems:
        for p in problems:
            render.err.print(f"error: {golden_path}: {p}", markup=False)
        raise typer.Exit(2)
    render.out.print(f"{golden_path}: ok", markup=False)


def diff(
    a: Path = typer.Argument(..., metavar="A"),
    b: Path = typer.Argument(..., metavar="B"),
    policy: str = PolicyOpt,
    report: Path = typer.Option(None, "--report", help="Write the JSON report here.", show_default=False),
) -> None:
    """Compare two goldens of the same scenario by the replay rules (A is the reference)."""
    from cli import render
    from replay.judge.diff import Policy
    from replay.run.compare import compare_goldens
    from replay.golden.store import read_golden
    from replay.jobs.publish import ReportFiles, publish

    doc = compare_goldens(read_golden(a), read_golden(b), str(a), str(b), Policy.parse(policy))
    publish(doc, ReportFiles(report=report), history=global_settings().history)
    render.print_outcome(doc)
    raise typer.Exit(0 if doc["verdict"] == "pass" else 1)


def scenarios() -> None:
    """List the built-in scenarios and their parameters."""
    from cli import render

    render.print_whole(render.scenarios_table())
