"""`golden profiles`: the launch profiles `--launch` accepts, and exactly what each one runs."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from cli.options import exits_cleanly

app = typer.Typer(
    help="Launch profiles: how `--launch PROFILE` starts a server (docs/profiles.md).",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def profiles(ctx: typer.Context) -> None:
    """List the built-in launch profiles (a TOML file path works wherever a name does)."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table

    from cli import render
    from replay.server.profile import builtin_profiles

    table = Table(title="built-in launch profiles")
    for column in ("name", "needs", "control", "description"):
        table.add_column(column, no_wrap=column == "name")  # a name is copied whole
    for p in builtin_profiles():
        needs = ", ".join(f"--{r}" for r in p.required) or "-"
        table.add_row(p.name, needs, p.control or "-", p.description)
    render.print_whole(table)

    from replay.server.topology import builtin_topology_names, load_topology

    topologies = Table(title="built-in topologies (workers behind SGLang's router: "
                             "docs/topologies.md)")
    for column in ("name", "workers", "policy", "description"):
        topologies.add_column(column, no_wrap=column == "name")
    for name in builtin_topology_names():
        t = load_topology(name)
        topologies.add_row(name, t.shape, t.policy, t.description)
    render.print_whole(topologies)


def show(
    name: str = typer.Argument(..., metavar="PROFILE", help="A built-in name or a TOML file."),
    model: str = typer.Option(None, "--model", help="Model for profiles that need one.", show_default=False),
    fault: str = typer.Option(None, "--fault", help="Fault for embedded-engine profiles.", show_default=False),
    attention_backend: str = typer.Option(None, "--attention-backend", help="Attention backend for SGLang profiles (default: per visible GPU).", show_default=False),
    port: int = typer.Option(30000, "--port", help="Port to show (a launch picks a free one)."),
    log_dir: Path = typer.Option(Path("golden-logs"), "--log-dir", help="Log directory to show."),
) -> None:
    """Print the exact command (shell-quoted) and environment a profile launches."""
    from cli import render
    from replay.utils.errors import GoldenError
    from replay.server.profile import attention_choice, load_profile
    from replay.server.profile import render as render_profile

    notes: list[str] = []
    try:
        profile = load_profile(name)
        backend = attention_choice(profile, attention_backend, notes.append)
        rendered = render_profile(profile, model=model, fault=fault, port=port, log_dir=log_dir,
                                  scratch_dir=log_dir / f"{profile.name}-scratch-XXXX",
                                  attention_backend=backend)
    except GoldenError as exc:
        render.err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    control = f"; control (--control auto): {profile.control}" if profile.control else ""
    render.out.print(f"# {profile.name} ({profile.source}): {profile.description}{control}",
                     markup=False)
    for note in notes:
        render.out.print(f"# {note}", markup=False)
    for key, value in rendered.env.items():
        render.out.print(f"{key}={shlex.quote(value)} \\", markup=False)
    if rendered.cwd:
        render.out.print(f"# working directory: {rendered.cwd}", markup=False)
    render.out.print(rendered.shell(), markup=False)


app.callback(invoke_without_command=True)(exits_cleanly(profiles, listing=True))
app.command("show")(exits_cleanly(show, listing=True))
