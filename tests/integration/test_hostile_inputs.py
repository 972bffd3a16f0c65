"""A careless user's inputs get one line and exit 2, never a hang, a wrap or a silent change
(issue 14, classes 2, 6 and 10: options, profiles, scenarios, two recorders, update, demo paths,
a full disk, a launched server's environment)."""

import errno
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.engine_cmds import safe_name
from cli.main import app
from replay.utils.errors import UsageError
from replay.run.journal import Journal, journal_path
from tests.data.fake_servers.helpers import fake_profile
from tests.support.goldens import record_single
from tests.support.stub_server import StubConfig, StubServer

runner = CliRunner()
SECRET = "sk-careless-0a1b2c3d4e5f6789"


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    return record_single(tmp_path_factory)


def error_line(res) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and res.exception is None or \
        isinstance(res.exception, SystemExit), repr(res.exception)
    return res.output


# --- non-finite numbers and huge sizes ----------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_profile_with_a_non_finite_timeout_is_refused(golden, tmp_path, value):
    profile = tmp_path / "p.toml"
    profile.write_text(f'command = ["true"]\nstartup_timeout = {value}\n')
    res = runner.invoke(app, ["replay", str(golden), "--launch", str(profile), "-q"])
    assert "startup_timeout" in error_line(res)


@pytest.mark.parametrize("key, value", [
    ("groups", 10**9), ("prefix_len", 10**12), ("token_hi", 2**40), ("max_new_tokens", 10**9),
])
def test_a_huge_scenario_is_refused_at_once(tmp_path, key, value):
    fields = {"groups": 1, "branches": 1, "prefix_len": 8, "suffix_len": 8, "turns": 0,
              "turn_suffix_len": 0, "max_new_tokens": 4, key: value}
    scenario = tmp_path / "huge.toml"
    scenario.write_text("".join(f"{k} = {v}\n" for k, v in fields.items()))
    res = runner.invoke(app, ["record", "--server", "http://127.0.0.1:9", "--scenario",
                              str(scenario), "--out", str(tmp_path / "x.zarr"), "-q"])
    assert key in error_line(res) and "too large" in res.output


# --- two recorders, update against another model ------------------------------------------------


def test_a_second_recorder_on_the_same_golden_is_refused_and_leaves_the_journal(tmp_path):
    out = tmp_path / "two.zarr"
    first, _ = Journal.start(journal_path(out), {"scenario": "x"}, resume=False)
    try:
        with StubServer(StubConfig(radix=False)) as stub:
            res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                      "--out", str(out), "-q"])
        assert "locked" in error_line(res)
        assert journal_path(out).exists() and '"scenario": "x"' in journal_path(out).read_text()
    finally:
        first.close()
    second, _ = Journal.start(journal_path(out), {"scenario": "x"}, resume=False)  # free again
    try:
        with pytest.raises(UsageError):
            Journal.start(journal_path(out), {"scenario": "x"}, resume=False)
    finally:
        second.close()


def _tree_bytes(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_update_against_a_server_of_another_model_replaces_nothing_unless_asked(golden, tmp_path):
    directory = tmp_path / "goldens"
    directory.mkdir()
    copy = directory / "single.zarr"
    os.system(f"cp -r {golden} {copy}")
    before = _tree_bytes(copy)
    with StubServer(StubConfig(radix=False, model_path="stub/another-model")) as stub:
        res = runner.invoke(app, ["update", str(directory), "--server", stub.url, "-q"])
        assert res.exit_code == 2 and "another-model" in res.output, res.output
        assert _tree_bytes(copy) == before
        res = runner.invoke(app, ["update", str(directory), "--server", stub.url, "-q",
                                  "--allow-model-change"])
    assert res.exit_code == 0, res.output


# --- paths and disks -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../evil", "/etc/passwd", "..", "a/../../b", ""])
def test_a_demo_scenario_name_never_leaves_the_output_directory(tmp_path, name):
    out = tmp_path / "demo-out"
    target = (out / f"{safe_name(name)}.zarr").resolve()
    assert target.parent == out.resolve()


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_writing_a_report_names_the_report(golden, tmp_path, monkeypatch):
    report = tmp_path / "r.json"
    monkeypatch.setattr("replay.report.files.os.fsync", _disk_full)
    with StubServer(StubConfig()) as stub:
        res = runner.invoke(app, ["replay", str(golden), "--server", stub.url, "-q",
                                  "--report", str(report)])
    assert f"{report}: No space left on device" in error_line(res)
    assert not list(tmp_path.glob(".r.json.*"))


def test_a_full_disk_while_writing_a_golden_names_the_golden(tmp_path, monkeypatch):
    out = tmp_path / "full.zarr"
    monkeypatch.setattr("replay.golden.atomic_dir._fsync_tree", _disk_full)
    with StubServer(StubConfig(radix=False)) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(out), "-q"])
    assert f"{out}: No space left on device" in error_line(res)


# --- a launched server's environment and log ---------------------------------------------------


def test_a_launched_server_never_inherits_the_api_key_nor_leaks_it_through_its_log(golden,
                                                                                   tmp_path):
    profile = fake_profile(tmp_path, "prints_secrets.py", warmup=False)
    report = tmp_path / "r.json"
    res = runner.invoke(app, ["replay", str(golden), "--launch", profile, "--log-dir",
                              str(tmp_path / "logs"), f"--server-arg={SECRET}", "--report",
                              str(report), "-q"], env={"GOLDEN_API_KEY": SECRET})
    assert "env key: (none)" in error_line(res)  # the log tail is quoted, the key never reached it
    assert SECRET not in res.output and SECRET not in report.read_text()
    assert json.loads(report.read_text())["verdict"] == "error"


ADMIN = "adm-profile-7a6b5c4d3e2f"


def env_profile(tmp_path: Path) -> Path:
    """prints_secrets.py launched with a secret in the profile's own `env` table."""
    path = Path(fake_profile(tmp_path, "prints_secrets.py", warmup=False))
    path.write_text(path.read_text() + f'\n[env]\nSERVER_ADMIN_KEY = "{ADMIN}"\n')
    return path


def test_a_profile_env_secret_never_reaches_stderr_or_any_report(golden, tmp_path):
    report, junit, html = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.html"
    res = runner.invoke(app, ["replay", str(golden), "--launch", str(env_profile(tmp_path)),
                              "--log-dir", str(tmp_path / "logs"), "--report", str(report),
                              "--junit", str(junit), "--html", str(html), "-q"])
    assert "SERVER_ADMIN_KEY" in error_line(res)  # the log tail is quoted ...
    for text in (res.output, report.read_text(), junit.read_text(), html.read_text()):
        assert ADMIN not in text  # ... without the value, from the header or the server


def test_a_secret_server_arg_never_reaches_the_errors_of_replay_or_minimize(golden, tmp_path):
    profile = fake_profile(tmp_path, "prints_secrets.py", warmup=False)
    args = ["--launch", profile, "--log-dir", str(tmp_path / "logs"), "--server-arg=--admin-key",
            f"--server-arg={SECRET}", "-q"]
    replayed = runner.invoke(app, ["replay", str(golden), *args])
    minimized = runner.invoke(app, ["minimize", str(golden), "--out", str(tmp_path / "m"),
                                    *args])
    for res in (replayed, minimized):
        assert "arg: --admin-key" in error_line(res)
        assert SECRET not in res.output


def test_minimize_scrubs_its_api_key_from_a_launched_servers_log_tail(golden, tmp_path):
    profile = fake_profile(tmp_path, "prints_secrets.py", warmup=False)
    res = runner.invoke(app, ["minimize", str(golden), "--out", str(tmp_path / "m"), "--launch",
                              profile, "--log-dir", str(tmp_path / "logs"), "-q",
                              f"--server-arg={SECRET}"], env={"GOLDEN_API_KEY": SECRET})
    assert "arg: " in error_line(res) and SECRET not in res.output
