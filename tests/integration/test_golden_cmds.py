"""`golden show | verify | scenarios` (and replay's reading of a golden) as a developer reads
them in a pipe or a CI log: a closed pipe, a golden checked out without its Git LFS data."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.server.launch import free_port
from tests.support import paths
from tests.support.closed_pipe import into_closed_pipe

COMMITTED = paths.GOLDENS / "single.zarr"
runner = CliRunner()


@pytest.mark.parametrize("args", [["scenarios"], ["show", str(COMMITTED)],
                                  ["show", str(COMMITTED), "--json"]])
def test_a_reader_that_closed_the_pipe_ends_the_listing_quietly_with_exit_0(args):
    res = into_closed_pipe(*args)
    assert (res.returncode, res.stderr) == (0, "")


LFS_POINTER = ("version https://git-lfs.github.com/spec/v1\n"
               "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
               "size 12345\n")


@pytest.fixture
def lfs_golden(tmp_path) -> Path:
    """A committed golden as a checkout without `git lfs pull` leaves it: a chunk is a pointer."""
    golden = tmp_path / "single.zarr"
    shutil.copytree(COMMITTED, golden)
    (golden / "logprobs" / "c" / "0").write_text(LFS_POINTER)
    return golden


@pytest.mark.parametrize("command", [["verify"], ["show"], ["show", "--json"], ["replay"]])
def test_a_golden_of_git_lfs_pointers_says_so_and_how_to_fetch_the_data(lfs_golden, command):
    server = ["--server", f"http://127.0.0.1:{free_port()}", "-q"] if command == ["replay"] else []
    res = runner.invoke(app, [command[0], str(lfs_golden), *command[1:], *server])
    assert res.exit_code == 2
    assert res.output == (f"error: {lfs_golden}'s chunks are Git LFS pointers, not data: run "
                          "git lfs pull\n")


def test_a_closed_pipe_before_a_verdict_is_written_is_an_error_never_a_pass():
    res = into_closed_pipe("diff", str(COMMITTED), str(COMMITTED))  # a pass, had it been read
    assert res.returncode == 2
    assert res.stderr == "error: the output pipe was closed before the verdict was written\n"
