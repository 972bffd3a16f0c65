"""`golden profiles` and `golden profiles show`."""

from __future__ import annotations

import shlex
import sys

import pytest
from typer.testing import CliRunner

from cli.profiles_cmd import app
from replay.server.profile import builtin_profile_names
from tests.support.closed_pipe import into_closed_pipe

runner = CliRunner()


def test_profiles_lists_every_builtin_with_what_it_needs():
    result = runner.invoke(app, [], terminal_width=200)
    assert result.exit_code == 0, result.output
    for name in builtin_profile_names():
        assert name in result.output
    assert "--model" in result.output and "seed test" in result.output


def test_show_prints_the_exact_shell_quoted_command():
    result = runner.invoke(app, ["show", "sglang-reference", "--model", "/models/My Model",
                                 "--port", "31000", "--attention-backend", "fa3"])
    assert result.exit_code == 0, result.output
    command = result.output.strip().splitlines()[-1]
    assert shlex.split(command) == [
        sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/My Model", "--host",
        "127.0.0.1", "--port", "31000", "--attention-backend", "fa3", "--page-size", "128",
        "--chunked-prefill-size", "2048", "--disable-radix-cache", "--disable-overlap-schedule",
        "--enable-deterministic-inference"]


def test_show_says_which_attention_backend_it_pins_and_why(monkeypatch):
    monkeypatch.setattr("replay.server.gpu.visible_gpu", lambda: ((10, 0), "nvidia-smi"))
    result = runner.invoke(app, ["show", "sglang-hicache-seed", "--model", "m"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1] == ("# launch profile sglang-hicache-seed: attention "
                                             "backend fa4 (default for sm100, seen by nvidia-smi)")
    assert "--attention-backend fa4" in result.output


def test_show_prints_the_environment_before_the_command():
    result = runner.invoke(app, ["show", "sglang-hicache-file-storage", "--model", "m",
                                 "--log-dir", "/var/log/g"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[2].startswith("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR=/var/log/g/")
    assert lines[2].endswith(" \\")
    assert "--hicache-storage-backend file" in lines[3]


def test_show_an_embedded_profile_with_a_fault():
    result = runner.invoke(app, ["show", "embedded-hicache", "--fault", "stale-host-page"])
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("--fault stale-host-page")
    assert "# working directory: " in result.output


def test_show_without_a_needed_model_is_a_usage_error():
    result = runner.invoke(app, ["show", "sglang-hicache-seed"])
    assert result.exit_code == 2
    assert "needs a model: pass --model" in result.output


def test_show_an_unknown_profile():
    result = runner.invoke(app, ["show", "nope"])
    assert result.exit_code == 2 and "no launch profile or file named 'nope'" in result.output


def test_profiles_lists_the_router_topologies_with_their_policy():
    res = runner.invoke(app, [])
    assert res.exit_code == 0
    assert "router-cache-aware" in res.output and "round_robin" in res.output


def test_profiles_lists_the_control_each_hicache_profile_names():
    res = runner.invoke(app, [], terminal_width=250)
    assert res.exit_code == 0
    row = next(line for line in res.output.splitlines() if " embedded-hicache " in line)
    assert "embedded-radix" in row


def test_profiles_show_names_the_control():
    res = runner.invoke(app, ["show", "sglang-cpu-hicache", "--model", "M"])
    assert res.exit_code == 0
    assert res.output.splitlines()[0].endswith("; control (--control auto): sglang-cpu-radix")


@pytest.mark.parametrize("args", [["profiles"], ["profiles", "show", "sglang-reference",
                                                 "--model", "m"]])
def test_a_reader_that_closed_the_pipe_ends_the_listing_quietly_with_exit_0(args):
    res = into_closed_pipe(*args)
    assert (res.returncode, res.stderr) == (0, "")
