"""Console output: progress on stderr, tables and the one-line verdict on stdout."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from cli.closed_pipe import PipeConsole
from cli.consoles import err, out
from cli.progress import ProgressLines
from replay.report.control import control_note
from replay.report.views import (
    first_failure_lines,
    flake_lines,
    rerun_lines,
    verdict_line,
    verdict_lines,
)

PIPE_WIDTH = 400  # columns a table may use when stdout is a pipe or a CI log (nothing cuts it)


def is_wide(columns: int) -> bool:
    """Whether tables of about `columns` fit: a real terminal that wide. In a pipe or a CI log
    the one-line-per-item forms are used, which grep and log viewers handle best."""
    return out.is_terminal and out.width >= columns


def print_whole(renderable: object) -> None:
    """Print a table or tree uncut: a terminal wraps it at its own width; in a pipe or CI log
    (where rich would assume 80 columns and cut cells to "hic…") it gets all the width it needs."""
    if out.is_terminal:
        out.print(renderable)
        return
    wide = PipeConsole(highlight=False, soft_wrap=True, width=PIPE_WIDTH, file=out.file,
                   color_system=None)
    wide.print(renderable)


def fits(renderable: object) -> bool:
    """Whether it prints on this terminal without squeezing a column."""
    from rich.measure import Measurement

    unbounded = out.options.update_width(PIPE_WIDTH)
    return Measurement.get(out, unbounded, renderable).maximum <= out.width


@contextlib.contextmanager
def progress_bar(label: str, total: int, quiet: bool) -> Iterator[Any]:
    """Yields a callback `(request_id, failed)` counting one finished request: a live bar on a
    terminal, plain lines in a pipe or CI log (cli/progress.py), nothing when quiet."""
    if quiet:
        yield lambda _id, _failed=False: None
        return
    if not err.is_terminal:
        lines = ProgressLines(label, total, lambda text: err.print(text, markup=False))
        try:
            yield lines.tick
        finally:
            lines.finish()
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda _id, _failed=False: bar.advance(task)


def scenarios_table() -> Table:
    table = Table(title="built-in scenarios")
    cols = ["name", "groups", "branches", "prefix_len", "suffix_len", "turns", "turn_suffix_len",
            "max_new_tokens", "token range", "top_k", "seed", "requests"]
    for c in cols:
        table.add_column(c)
    from replay.golden.scenario import PRESETS

    for s in PRESETS.values():
        table.add_row(s.name, str(s.groups), str(s.branches), str(s.prefix_len), str(s.suffix_len),
                      str(s.turns), str(s.turn_suffix_len), str(s.max_new_tokens),
                      f"[{s.token_lo}, {s.token_hi})", str(s.top_k), str(s.seed), str(s.requests))
    return table


def failures_table(report: dict[str, Any], limit: int = 30) -> Table | None:
    failing = [r for r in report.get("requests", []) if not r["passed"]]
    if not failing:
        return None
    table = Table(title=f"failing requests ({len(failing)})")
    with_control = any("control_status" in r for r in failing)
    for c in ("request", "repeat", "status", "pos", "golden tok", "replay tok", "golden logprob",
              "replay logprob", "ulp", "cached", *(("control",) if with_control else ())):
        table.add_column(c)
    for r in failing[:limit]:
        f = r.get("first_divergence") or {}
        control = (control_note(r) or "",) if with_control else ()
        table.add_row(
            r["id"], str(r["repeat"]), r["status"], str(f.get("position", "")),
            str(f.get("golden_token", "")), str(f.get("replay_token", "")),
            str(f.get("golden_logprob", "")), str(f.get("replay_logprob", "")),
            str(f.get("ulp", "")),
            str(r["cached_tokens"]) + (f" ({r['cache_problem']})" if r.get("cache_problem") else ""),
            *control,
        )
    if len(failing) > limit:
        table.caption = f"... and {len(failing) - limit} more (see --report)"
    return table


def print_outcome(report: dict[str, Any]) -> None:
    """Failing requests (a table on wide terminals, one line each otherwise), the requests that
    failed in some repeats, then the verdict; an error is one `error: ...` line on stderr."""
    if report["verdict"] == "error":
        err.print(verdict_line(report), markup=False)
        for line in rerun_lines(report):  # a merged report: the shards that did not pass
            out.print(line, markup=False)
        return
    if is_wide(120):
        table = failures_table(report)
        if table is not None:
            out.print(table)
    else:
        for line in first_failure_lines(report):
            out.print(line, markup=False)
    for line in flake_lines(report):
        out.print(line, markup=False)
    for line in rerun_lines(report):
        out.print(line, markup=False)
    for line in verdict_lines(report):
        out.print(line, markup=False)


def golden_tree(golden: Any, name: str) -> Any:
    """The conversation tree: group -> branch -> turns, with lengths and recorded hits."""
    from rich.tree import Tree

    spec = golden.scenario
    meta = golden.meta
    model = (meta.get("model_info") or {}).get("model_path", "?")
    reference = meta.get("reference", "cache-off")
    root = Tree(f"{name}: scenario {spec.get('name')} (seed {spec.get('seed')}, top-k "
                f"{golden.top_k}), model {model}, {reference} reference from "
                f"{meta.get('server_url', '?')} at {meta.get('created', '?')}")
    groups: dict[int, Any] = {}
    nodes: dict[int, Any] = {}
    for i, r in enumerate(golden.requests):
        if r.parent < 0:
            if r.group not in groups:
                groups[r.group] = root.add(f"g{r.group}: prefix {len(golden.prefixes[r.group])} tokens")
            parent_node = groups[r.group]
        else:
            parent_node = nodes[r.parent]
        label = (f"{r.id}: input {len(golden.input_ids(i))}, +{len(r.new_tokens)} new, "
                 f"output {len(r.output_ids)}, cached {r.cached_tokens}")
        nodes[i] = parent_node.add(label)
    return root
