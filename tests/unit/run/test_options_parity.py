"""`ReplayOptions` is the one declaration of the replay options: every field has its one CLI
declaration, every command that replays offers it, `replay_argv` writes it back (repro.sh), and
the pytest plugin passes it on. Adding a field without the rest fails here."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from cli.main import app
from cli.options import REPLAY_FLAGS, takes_replay_options
from replay.jobs import pytest_plugin, session
from replay.jobs.minimize.search import Candidate, Judgement, Result
from replay.jobs.minimize.session import Failure, MinimizeSettings, repro_script
from replay.run.replayer import ReplayOptions, option_flag, replay_argv

FIELDS = [f.name for f in fields(ReplayOptions)]
# One value per field that differs from its default: a new field needs one here (bools: True).
NON_DEFAULT: dict[str, Any] = {
    "policy": "ulp:3", "schedule": "dag", "repeat": 3, "expect_cache": "mamba:16",
    "require_tier": "host",
}
REPLAYING_COMMANDS = ("replay", "matrix", "minimize")


def everything_changed() -> ReplayOptions:
    values = {n: NON_DEFAULT.get(n, True) for n in FIELDS}
    options = ReplayOptions(**values)
    unchanged = [n for n in FIELDS if getattr(options, n) == getattr(ReplayOptions(), n)]
    assert not unchanged, f"give {unchanged} a non-default value in NON_DEFAULT"
    return options


def test_replay_options_are_keyword_only():
    with pytest.raises(TypeError):
        ReplayOptions("exact")  # type: ignore[misc]


@pytest.mark.parametrize("name", FIELDS)
def test_every_field_has_one_cli_declaration_with_its_flag_and_default(name):
    assert name in REPLAY_FLAGS, f"declare {option_flag(name)} in cli/options.py REPLAY_FLAGS"
    _, option = REPLAY_FLAGS[name]
    assert option.param_decls[0] == option_flag(name)
    default = getattr(ReplayOptions(), name)
    assert option.default == (str(default) if name == "policy" else default)


def test_the_cli_declares_no_replay_option_that_is_not_a_field():
    assert sorted(REPLAY_FLAGS) == sorted(FIELDS)


@pytest.mark.parametrize("command", REPLAYING_COMMANDS)
def test_every_replaying_command_offers_every_option_with_its_default(command):
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    defaults = {opt: p.default for p in click_command.params for opt in p.opts}
    for name in FIELDS:
        default = getattr(ReplayOptions(), name)
        assert defaults[option_flag(name)] == (str(default) if name == "policy" else default)


def test_replay_argv_parsed_by_the_cli_gives_the_same_options():
    seen: list[ReplayOptions] = []
    probe = typer.Typer()

    @probe.command()
    @takes_replay_options()
    def cmd(options: Any = None) -> None:
        seen.append(options)

    options = everything_changed()
    result = CliRunner().invoke(probe, replay_argv(options))
    assert result.exit_code == 0, result.output
    assert seen == [options]


def test_replay_argv_of_the_defaults_is_the_valued_options_only():
    assert replay_argv(ReplayOptions()) == ["--policy", "exact", "--schedule", "lockstep",
                                            "--repeat", "1", "--expect-cache", "auto"]


def test_the_repro_script_carries_every_option(tmp_path):
    options = everything_changed()
    cand = Candidate(keep=(0,), schedule=options.schedule, concurrency=2, repeat=options.repeat)
    fails = Judgement(fails=True, failed_repeats=1)
    result = Result(start=cand, final=cand, judgement=fails, steps=[], replays=1, seconds=0.0,
                    budget_exhausted=False, rerun=fails)
    script = repro_script(session.ServerTarget(url="http://127.0.0.1:1"),
                          MinimizeSettings(options=options), result, Failure("tier"))
    command = script.strip().splitlines()[-1]
    for arg in replay_argv(options):
        assert f" {arg}" in command or f" '{arg}'" in command


def test_the_pytest_plugin_passes_every_option_on(monkeypatch):
    seen: list[ReplayOptions] = []

    def fake_replay_golden(golden: Path, target: Any, options: ReplayOptions, *args: Any,
                           **kwargs: Any) -> dict[str, Any]:
        seen.append(options)
        return {"verdict": "pass"}

    monkeypatch.setattr(session, "replay_golden", fake_replay_golden)
    options = everything_changed()
    pytest_plugin.replay_golden("http://127.0.0.1:1", Path("g.zarr"),
                                **{n: getattr(options, n) for n in FIELDS})
    assert seen == [options]
