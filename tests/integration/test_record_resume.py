"""A recording killed with SIGKILL at any moment leaves no golden, and `--resume` finishes it
into a golden identical (arrays and checksums) to an uninterrupted recording."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from cli.main import app
from replay.server.apis.base import Completion
from replay.run.journal import decode as journal_decode, encode as journal_encode, journal_path
from tests.support.stub_server import StubConfig, StubServer
from tests.support import paths

REPO = paths.REPO
SCENARIO = "groups = 2\nbranches = 2\nprefix_len = 32\nsuffix_len = 8\nturns = 2\n" \
           "turn_suffix_len = 4\nmax_new_tokens = 6\ntop_k = 3\n"
runner = CliRunner()


def record_args(url: str, scenario: Path, out: Path, *extra: str) -> list[str]:
    return ["record", "--server", url, "--scenario", str(scenario), "--out", str(out),
            "--concurrency", "1", "--quiet", *extra]


def array_checksums(path: Path) -> dict:
    return dict(zarr.open_group(str(path), mode="r").attrs["arrays"])


def journal_lines(path: Path) -> int:
    j = journal_path(path)
    return j.read_text().count("\n") if j.exists() else 0


def kill_after_lines(url: str, scenario: Path, out: Path, lines: int) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "cli", *record_args(url, scenario, out)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while journal_lines(out) < lines and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("s") / "resume.toml"
    p.write_text(SCENARIO)
    return p


@pytest.fixture(scope="module")
def uninterrupted(scenario, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("full") / "full.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        res = runner.invoke(app, record_args(stub.url, scenario, out))
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.parametrize("kill_after", [1, 4, 9])
def test_killed_recording_resumes_to_an_identical_golden(scenario, uninterrupted, tmp_path, kill_after):
    out = tmp_path / "g.zarr"
    with StubServer(StubConfig(radix=False, delay=0.05)) as stub:
        kill_after_lines(stub.url, scenario, out, 1 + kill_after)
        assert not out.exists(), "a killed recording must leave no golden at the target"
        assert journal_lines(out) >= 1 + kill_after
        res = runner.invoke(app, record_args(stub.url, scenario, out, "--resume"))
    assert res.exit_code == 0, res.output
    assert array_checksums(out) == array_checksums(uninterrupted)
    assert not journal_path(out).exists()


def test_resume_sends_only_the_missing_requests(scenario, tmp_path):
    out = tmp_path / "g.zarr"
    with StubServer(StubConfig(radix=False, delay=0.05)) as stub:
        kill_after_lines(stub.url, scenario, out, 1 + 5)
    completed = journal_lines(out) - 1
    with StubServer(StubConfig(radix=False)) as stub:
        res = runner.invoke(app, record_args(stub.url, scenario, out, "--resume"))
        sent = stub.requests
    assert res.exit_code == 0, res.output
    assert sent == 12 - completed


def test_resume_without_a_journal_is_an_error(scenario, tmp_path):
    with StubServer(StubConfig(radix=False)) as stub:
        res = runner.invoke(app, record_args(stub.url, scenario, tmp_path / "n.zarr", "--resume"))
    assert res.exit_code == 2 and "nothing to resume" in res.output


def test_resume_refuses_a_journal_of_another_scenario(scenario, tmp_path):
    out = tmp_path / "g.zarr"
    journal_path(out).write_text('{"format": "golden-replay/journal/1", "scenario": {"name": "x"}, "model": "stub/model@0"}\n')
    with StubServer(StubConfig(radix=False)) as stub:
        res = runner.invoke(app, record_args(stub.url, scenario, out, "--resume"))
    assert res.exit_code == 2 and "another scenario" in res.output


def test_torn_last_journal_line_is_ignored(scenario, uninterrupted, tmp_path):
    out = tmp_path / "g.zarr"
    with StubServer(StubConfig(radix=False, delay=0.02)) as stub:
        kill_after_lines(stub.url, scenario, out, 4)
        with open(journal_path(out), "a") as f:
            f.write('{"index": 7, "id": "g1/b1/t1", "output_')  # torn mid-write
        res = runner.invoke(app, record_args(stub.url, scenario, out, "--resume"))
    assert res.exit_code == 0, res.output
    assert array_checksums(out) == array_checksums(uninterrupted)


def _completion(retractions: int) -> Completion:
    return Completion(output_ids=np.array([1, 2], np.int32), logprobs=np.array([-0.5, -1.0]),
                      top_ids=None, top_logprobs=None, cached_tokens=0,
                      num_retractions=retractions)


def test_journal_keeps_the_retraction_count():
    assert journal_decode(journal_encode(0, "g0/b0/t0", _completion(2))).num_retractions == 2


def test_journal_line_of_an_older_version_reads_zero_retractions():
    entry = journal_encode(0, "g0/b0/t0", _completion(2))
    del entry["num_retractions"]
    assert journal_decode(entry).num_retractions == 0
