"""`golden minimize` never claims a repro it did not see, and never leaves a half-written or
unusable `--out` (issue 22: wrong verdicts, secrets and safety).

The server is the in-process stub with a tamper that over-reports `cached_tokens` (a hit as long
as the prompt: the `over_reported` failure class) for its first N answers only: a failure that
goes away while the search runs, as a flaky or state-dependent bug does.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.data.fake_servers.helpers import record_golden
from tests.support.stub_server import StubConfig, StubServer

runner = CliRunner()


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    return record_golden(tmp_path_factory.mktemp("g") / "small.zarr")  # 8 requests


def over_report(first: int | None = None):
    """A tamper: every answer (or the first `first`) reports the whole prompt as cached."""
    def tamper(n, ids, resp):
        if first is None or n < first:
            resp["meta_info"]["cached_tokens"] = len(ids)
            resp["meta_info"]["cached_tokens_details"] = {"device": len(ids), "host": 0}
        return resp
    return tamper


def minimize(golden: Path, out: Path, config: StubConfig, *args: str):
    with StubServer(config) as stub:
        res = runner.invoke(app, ["minimize", str(golden), "--out", str(out), "--server",
                                  stub.url, "--api", "sglang", "-q", *args])
    return res, stub


def test_a_failure_that_vanishes_during_the_search_is_not_reproduced_and_exits_3(golden,
                                                                                  tmp_path):
    out = tmp_path / "out"
    # 8 + 8 answers: the first replay and the start's rerun; 4 more: the first candidates.
    res, _ = minimize(golden, out, StubConfig(tamper=over_report(first=20)))
    assert res.exit_code == 3, res.output
    assert "not reproduced" in res.output and "1-minimal" not in res.output
    doc = json.loads((out / "minimize.json").read_text())
    assert doc["verdict"] == "not reproduced"
    assert not doc["reproduced"] and not doc["one_minimal"] and not doc["rerun"]["fails"]
    assert not (out / "repro.sh").exists()


def test_a_failure_that_stays_is_rerun_and_reported_1_minimal(golden, tmp_path):
    out = tmp_path / "out"
    res, _ = minimize(golden, out, StubConfig(tamper=over_report()))
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "minimize.json").read_text())
    assert doc["verdict"] == "1-minimal" and doc["reproduced"] and doc["rerun"]["fails"]
    assert os.access(out / "repro.sh", os.X_OK)


@pytest.mark.parametrize("kind", ["file", "dangling symlink", "symlink to a directory"])
def test_an_out_that_cannot_be_a_directory_is_refused_before_any_replay(golden, tmp_path, kind):
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("not a directory")
    elif kind == "dangling symlink":
        out.symlink_to(tmp_path / "nowhere")
    else:
        (tmp_path / "elsewhere").mkdir()
        out.symlink_to(tmp_path / "elsewhere")
    res, stub = minimize(golden, out, StubConfig(tamper=over_report()), "--force")
    assert res.exit_code == 2, res.output
    assert str(out) in res.output and "Traceback" not in res.output
    assert stub.requests == 0  # refused before the first replay


def test_force_never_replaces_a_directory_that_is_not_a_minimize_output(golden, tmp_path):
    out = tmp_path / "home"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    res, stub = minimize(golden, out, StubConfig(tamper=over_report()), "--force")
    assert res.exit_code == 2 and "refusing to replace it" in res.output
    assert stub.requests == 0 and (out / "precious.txt").read_text() == "keep me"


def test_force_replaces_a_previous_output_whole(golden, tmp_path):
    out = tmp_path / "out"
    assert minimize(golden, out, StubConfig(tamper=over_report()))[0].exit_code == 0
    (out / "stale.txt").write_text("from before")
    res, _ = minimize(golden, out, StubConfig(tamper=over_report()), "--force")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["golden.zarr", "minimize.json",
                                                      "report.json", "repro.sh"]


def test_a_full_disk_while_writing_the_outputs_leaves_no_output_at_all(golden, tmp_path,
                                                                       monkeypatch):
    real_fsync = os.fsync

    def fsync(fd):  # the disk fills up as the record, the last file, is written
        if "minimize.json" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    out = tmp_path / "out"
    res, _ = minimize(golden, out, StubConfig(tamper=over_report()))
    assert res.exit_code == 2, res.output
    assert "No space left on device" in res.output and str(out) in res.output
    assert not out.exists()  # no golden, no report, no repro.sh that exits 0
    assert [p.name for p in tmp_path.iterdir()] == []  # and no staging directory


def test_a_log_dir_inside_out_is_refused_before_the_server_starts(golden, tmp_path):
    out = tmp_path / "out"
    res = runner.invoke(app, ["minimize", str(golden), "--out", str(out), "--launch",
                              "embedded-hicache", "--log-dir", str(out / "logs"), "-q"])
    assert res.exit_code == 2 and "--log-dir" in res.output, res.output
    assert not out.exists()
