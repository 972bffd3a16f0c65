"""`ClientOptions` and `ServerTarget` are the one declaration of the client and the server
options, as `ReplayOptions` is of the replay options (test_options_parity.py): every field has one
CLI declaration with the library's flag, every command that talks to a server offers it (or says
why not), repro.sh and a matrix's rerun line write it back, and the pytest plugin passes it on.
Adding a field without the rest fails here."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from cli.main import app
from cli.options import (
    CLIENT_FLAGS, NOT_FOR_A_REFERENCE, TARGET_FLAGS, takes_client_options, takes_server_target,
)
from replay.jobs import pytest_plugin, session
from replay.jobs.minimize.repro_script import rerun_command
from replay.jobs.minimize.search import Candidate, Judgement, Result
from replay.jobs.minimize.session import Failure, MinimizeSettings, repro_script
from replay.run.replayer import ReplayOptions
from replay.server.target import ServerTarget
from replay.server.transport import ClientOptions, client_argv

CLIENT_FIELDS = [f.name for f in fields(ClientOptions)]
TARGET_FIELDS = [f.name for f in fields(ServerTarget) if f.name != "notify"]
# What each command that talks to a server leaves out, on purpose.
NOT_OFFERED = {"record": set(NOT_FOR_A_REFERENCE), "update": set(NOT_FOR_A_REFERENCE),
               "matrix": {"url"}}  # a matrix launches each of its profiles
SERVER_COMMANDS = ("record", "replay", "matrix", "minimize", "update")
SECRETS = {"api_key": "sk-client-1", "admin_api_key": "sk-admin-2"}
CHANGED_CLIENT = ClientOptions(concurrency=3, request_timeout=12.5, **SECRETS)
CHANGED_LAUNCH = ServerTarget(profile="embedded-hicache", model="m", log_dir=Path("logs-x"),
                              fault="host-bf16", extra_args=("--a=1", "--b"),
                              attention_backend="triton")


def click_params(command: str) -> dict[str, Any]:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {opt: p for p in click_command.params for opt in p.opts}


def test_every_client_field_is_a_flag_or_fixed_tuning():
    assert sorted([*ClientOptions.FLAGS, *ClientOptions.FIXED]) == sorted(CLIENT_FIELDS)
    assert set(ClientOptions.SECRET_ENV) <= set(ClientOptions.FLAGS)


def test_every_target_field_has_a_flag():
    assert sorted(ServerTarget.FLAGS) == sorted(TARGET_FIELDS)


def defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default_factory() if callable(f.default_factory) else f.default
            for f in fields(cls)}


@pytest.mark.parametrize("cls, declared", [(ClientOptions, CLIENT_FLAGS),
                                           (ServerTarget, TARGET_FLAGS)], ids=["client", "target"])
def test_every_field_has_one_cli_declaration_with_its_flag_and_default(cls, declared):
    assert sorted(declared) == sorted(cls.FLAGS)
    for name, (_, option) in declared.items():
        assert option.param_decls[0] == cls.FLAGS[name], name
        default = defaults(cls)[name]
        assert option.default == (list(default) if isinstance(default, tuple) else default), name


def test_a_secret_is_read_from_its_variable():
    for name, env in ClientOptions.SECRET_ENV.items():
        assert CLIENT_FLAGS[name][1].envvar == env


@pytest.mark.parametrize("command", SERVER_COMMANDS)
def test_every_command_that_talks_to_a_server_offers_every_client_option(command):
    params = click_params(command)
    for name, flag in ClientOptions.FLAGS.items():
        assert params[flag].default == getattr(ClientOptions(), name), (command, flag)


@pytest.mark.parametrize("command", SERVER_COMMANDS)
def test_every_such_command_offers_every_server_option_but_those_it_refuses(command):
    params = click_params(command)
    offered = {name for name, flag in ServerTarget.FLAGS.items() if flag in params}
    assert offered == set(TARGET_FIELDS) - NOT_OFFERED.get(command, set())




def parsed(group: Any, argv: list[str], env: dict[str, str] | None = None) -> Any:
    """What a command decorated with `group` (takes_client_options, takes_server_target)
    receives from `argv`: the one parameter it expands."""
    seen: list[Any] = []
    cli = typer.Typer()

    @cli.command()
    @group()
    def cmd(client: Any = None, target: Any = None) -> None:
        seen.append(client if client is not None else target)

    result = CliRunner().invoke(cli, argv, env=env)
    assert result.exit_code == 0, result.output
    return seen[0]


def test_client_argv_and_the_variables_give_the_same_options_back():
    env = {ClientOptions.SECRET_ENV[k]: v for k, v in SECRETS.items()}
    argv = client_argv(CHANGED_CLIENT)
    assert not set(SECRETS.values()) & set(argv)  # never on a command line
    assert parsed(takes_client_options, argv, env) == CHANGED_CLIENT


@pytest.mark.parametrize("target", [CHANGED_LAUNCH, ServerTarget(url="http://127.0.0.1:9/")],
                         ids=["launch", "url"])
def test_a_targets_argv_parsed_by_the_cli_gives_the_same_target(target):
    assert parsed(takes_server_target, target.argv()) == target


def test_repro_sh_carries_every_client_and_server_option():
    cand = Candidate(keep=(0,), schedule="lockstep", concurrency=CHANGED_CLIENT.concurrency,
                     repeat=1)
    fails = Judgement(fails=True, failed_repeats=1)
    result = Result(start=cand, final=cand, judgement=fails, steps=[], replays=1, seconds=0.0,
                    budget_exhausted=False, rerun=fails)
    script = repro_script(CHANGED_LAUNCH, MinimizeSettings(client=CHANGED_CLIENT), result,
                          Failure("tier"))
    for word in [*client_argv(CHANGED_CLIENT), *CHANGED_LAUNCH.argv()]:
        assert f" {word} " in script or f" '{word}' " in script or f" {word}\n" in script, word
    for value in SECRETS.values():
        assert value not in script
    for env in ClientOptions.SECRET_ENV.values():
        assert env in script


def test_a_matrix_rerun_line_carries_every_client_and_server_option():
    line = rerun_command("g.zarr", CHANGED_LAUNCH, ReplayOptions(), CHANGED_CLIENT)
    for word in [*client_argv(CHANGED_CLIENT), *CHANGED_LAUNCH.argv()]:
        assert f" {word}" in line or f" '{word}'" in line, word
    assert not any(value in line for value in SECRETS.values())


def test_the_pytest_plugin_passes_every_client_option_on(monkeypatch):
    seen: list[ClientOptions] = []

    def fake_replay_golden(golden: Path, target: Any, options: ReplayOptions,
                           client: ClientOptions, **kwargs: Any) -> dict[str, Any]:
        seen.append(client)
        return {"verdict": "pass"}

    monkeypatch.setattr(session, "replay_golden", fake_replay_golden)
    keywords = {flag.removeprefix("--").replace("-", "_"): getattr(CHANGED_CLIENT, name)
                for name, flag in ClientOptions.FLAGS.items()}
    pytest_plugin.replay_golden("http://127.0.0.1:1", Path("g.zarr"), **keywords)
    assert seen == [CHANGED_CLIENT]


def test_the_pytest_plugin_has_an_option_for_every_server_field_and_every_secret():
    assert sorted(pytest_plugin.TARGET_OPTIONS) == sorted(TARGET_FIELDS)
    assert {f: env for f, (_, env) in pytest_plugin.SECRET_OPTIONS.items()} == \
        ClientOptions.SECRET_ENV


class FakeConfig:
    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self.pluginmanager = self

    def get_plugin(self, name: str) -> None:
        return None

    def getoption(self, dest: str) -> Any:
        return self.values.get(dest)


def test_the_pytest_plugins_session_server_is_every_option_given():
    values = {pytest_plugin.target_option(f).removeprefix("--").replace("-", "_"): getattr(
        CHANGED_LAUNCH, f) for f in TARGET_FIELDS}
    values["golden_server_arg"] = list(CHANGED_LAUNCH.extra_args)  # an appended option: a list
    values["golden_log_dir"] = str(CHANGED_LAUNCH.log_dir)
    assert pytest_plugin.session_target(FakeConfig(values), None) == CHANGED_LAUNCH
