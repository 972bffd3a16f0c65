"""Options every entry point shares: --api everywhere, and output that a pipe does not cut."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("argv", [
    ["replay", "g.zarr", "--server", "http://127.0.0.1:9"],
    ["record", "--server", "http://127.0.0.1:9", "--out", "x.zarr"],
    ["matrix", "g.zarr", "--launch", "embedded-hicache"],
    ["update", ".", "--server", "http://127.0.0.1:9"],
])
def test_every_entry_point_takes_api(argv):
    res = runner.invoke(app, [*argv, "--api", "grpc"])
    assert "No such option" not in res.output
    assert res.exit_code == 2


def test_record_with_an_unknown_api_says_which_are_known(tmp_path):
    res = runner.invoke(app, ["record", "--server", "http://127.0.0.1:9", "--api", "grpc",
                              "--out", str(tmp_path / "x.zarr"), "-q"])
    assert res.exit_code == 2 and "unknown --api 'grpc'" in res.output


def _piped(*args: str) -> str:
    """The command's stdout when it is a pipe (as in a CI log), with a narrow COLUMNS."""
    env = {"COLUMNS": "60", "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    proc = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_scenarios_table_prints_whole_in_a_pipe():
    text = _piped("scenarios")
    assert "hicache-branching" in text and "…" not in text


def test_show_tree_prints_whole_in_a_pipe():
    text = _piped("show", "goldens/hicache-branching.zarr")
    assert "…" not in text and "g2/b2/t2" in text


def test_profiles_table_prints_whole_in_a_pipe():
    text = _piped("profiles")
    assert "embedded-hicache-write-back" in text and "…" not in text


@pytest.mark.parametrize("argv", [["replay", "g.zarr"], ["record", "--out", "x.zarr"]])
def test_a_server_without_a_scheme_gets_one_line_saying_which_url_it_meant(argv):
    res = runner.invoke(app, [*argv, "--server", "localhost:30000", "-q"])
    assert res.exit_code == 2
    assert res.output == ("error: --server 'localhost:30000' has no scheme; did you mean "
                          "http://localhost:30000?\n")
