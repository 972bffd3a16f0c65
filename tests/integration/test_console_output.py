"""Console output as a CI log gets it (stdout and stderr pipes): progress as plain lines, failure
lines that fit a terminal, per-request flake counts after --repeat, every error as one `error: ...`
line on stderr, and the matrix table whole in a pipe and on an 80-column terminal."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli import matrix_cmd, render
from cli.progress import ProgressLines
from replay.golden.store import read_golden
from tests.support import paths
from tests.support.console import joined_commands
from tests.support.goldens import SMALL_TREE, record_scenario
from tests.support.stub_server import StubConfig, StubServer

runner = CliRunner()


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    return record_scenario(tmp_path_factory.mktemp("golden"), SMALL_TREE)


def piped(*args: str) -> subprocess.CompletedProcess:
    """`golden ARGS` with stdout and stderr pipes, as in a CI log."""
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=paths.REPO,
                          env={**os.environ, "COLUMNS": "80", "TERM": "dumb"})


def drift_in_repeat(golden: Path, request_id: str, repeats: set[int]):
    """A tamper that nudges one logprob of `request_id`'s answer in the given repeats."""
    g = read_golden(golden)
    target = g.input_ids(g.index(request_id)).tolist()
    per_repeat = len(g.requests)

    def tamper(n, ids, resp):
        if ids == target and n // per_repeat in repeats:
            row = resp["meta_info"]["output_token_logprobs"][3]
            row[0] = float(row[0]) * (1 + 1e-12)
        return resp
    return tamper


def test_progress_in_a_pipe_is_plain_lines_with_counts_and_eta(golden):
    with StubServer(StubConfig()) as stub:
        res = piped("replay", str(golden), "--server", stub.url, "--repeat", "3")
    assert res.returncode == 0, res.stderr
    total = 3 * len(read_golden(golden).requests)
    lines = [l for l in res.stderr.splitlines() if l.startswith("replay s.zarr:")]
    assert lines[-1].startswith(f"replay s.zarr: {total}/{total} done, 0 failed, ")
    assert any(", ETA " in l for l in lines[:-1])
    assert "\x1b[" not in res.stderr and "━" not in res.stderr  # no live bar, no escapes


def test_progress_lines_come_every_tenth_or_every_interval_and_count_failures():
    now = [0.0]
    written: list[str] = []
    lines = ProgressLines("replay g", 100, written.append, every_s=30, clock=lambda: now[0])
    for i in range(25):
        now[0] += 0.1
        lines.tick("r", failed=i == 3)
    assert len(written) == 2 and written[-1].startswith("replay g: 20/100 done, 1 failed, 2 s")
    now[0] += 31
    lines.tick("r")
    assert written[-1].startswith("replay g: 26/100 done, 1 failed, 34 s elapsed, ETA ")


def test_failure_lines_fit_a_terminal(golden):
    with StubServer(StubConfig(tamper=drift_in_repeat(golden, "g0/b1/t1", {0}))) as stub:
        res = piped("replay", str(golden), "--server", stub.url, "-q")
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    at = lines.index("g0/b1/t1#0 logprob_drift: first difference at output position 3 (logprob)")
    assert lines[at + 1].startswith("  golden token ")
    assert max(len(l) for l in lines) <= 120


def test_a_failing_replay_names_every_failing_request_in_lines_of_at_most_120_characters(
        golden, tmp_path):
    g = read_golden(golden)
    broken = {tuple(g.input_ids(i).tolist()): r.id for i, r in enumerate(g.requests)
              if r.parent >= 0}

    def tamper(n, ids, resp):
        if tuple(ids) in broken:
            row = resp["meta_info"]["output_token_logprobs"][1]
            row[0] = float(row[0]) * (1 + 1e-12)
            resp["meta_info"]["cached_tokens"] = 0
        return resp
    with StubServer(StubConfig(tamper=tamper)) as stub:
        res = piped("replay", str(golden), "--server", stub.url, "-q", "--expect-cache",
                    "attention", "--junit", str(tmp_path / "j.xml"))
    assert res.returncode == 1, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(l) for l in lines) <= 120, max(lines, key=len)
    for rid in broken.values():
        assert f"{rid}#0 logprob_drift: first difference at output position 1 (logprob)" in lines
        assert any(l.startswith(f"{rid}#0 cache_miss: cached_tokens 0 ") for l in lines), rid
    assert "cache_miss: cached_tokens 0 " in (tmp_path / "j.xml").read_text()
    [rerun] = joined_commands(res.stdout)
    assert rerun.startswith(f"rerun: golden replay {golden} --server {stub.url} --api auto ")
    assert any(l.startswith("FAIL: ") for l in lines)


def test_a_passing_replay_in_a_pipe_prints_its_verdict_and_no_request_rows(golden):
    with StubServer(StubConfig()) as stub:
        res = piped("replay", str(golden), "--server", stub.url, "-q")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("PASS: ") and all(l.startswith("    ") for l in lines[1:])


def test_flake_counts_per_request_after_repeat(golden):
    with StubServer(StubConfig(tamper=drift_in_repeat(golden, "g1/b0/t1", {0, 2}))) as stub:
        res = piped("replay", str(golden), "--server", stub.url, "--repeat", "3", "-q")
    assert res.returncode == 1
    assert "g1/b0/t1: failed 2/3 repeats (logprob_drift x2)" in res.stdout.splitlines()


def test_a_replay_error_is_one_error_line_on_stderr_and_nothing_on_stdout(golden):
    res = piped("replay", str(golden), "--server", "http://127.0.0.1:9", "-q")
    assert res.returncode == 2
    assert res.stdout == ""
    assert [l for l in res.stderr.splitlines() if l.startswith("error: ")] != []
    assert "ERROR" not in res.stderr


# --- the matrix table ---------------------------------------------------------------------------

LONG_NAMES = ["embedded-hicache-write-back", "embedded-hicache-layer-first",
              "embedded-hicache-storage", "embedded-sglang-hicache"]


def long_named_matrix() -> dict:
    """The captured matrix report with profile names too long for 80 columns side by side."""
    doc = json.loads((paths.DATA / "reports" / "matrix.json").read_text())
    m = doc["matrix"]
    renamed = dict(zip(m["profiles"], LONG_NAMES))
    m["reports"] = {renamed[k]: v for k, v in m["reports"].items()}
    m["verdicts"] = {renamed[k]: v for k, v in (m.get("verdicts") or {}).items()}
    m["profiles"] = LONG_NAMES
    return doc


MATRIX = long_named_matrix()


def printed(monkeypatch, console: Console) -> str:
    monkeypatch.setattr(render, "out", console)
    monkeypatch.setattr(render, "err", Console(file=io.StringIO()))
    matrix_cmd.print_matrix(MATRIX)
    return console.file.getvalue()


def test_the_matrix_table_prints_whole_in_a_pipe(monkeypatch):
    text = printed(monkeypatch, Console(file=io.StringIO(), width=80))
    header = next(l for l in text.splitlines() if l.startswith("┃ request"))
    for name in matrix_cmd.shown_profiles(MATRIX):
        assert name in header
    assert "…" not in text


def test_the_matrix_table_prints_whole_on_an_80_column_terminal(monkeypatch):
    text = printed(monkeypatch, Console(file=io.StringIO(), width=80, force_terminal=True,
                                        color_system=None))
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert "…" not in plain
    assert max(len(l) for l in plain.splitlines() if "│" in l or "┃" in l) <= 80
    for i, name in enumerate(matrix_cmd.shown_profiles(MATRIX), 1):
        assert f"  {i} = {name}" in plain.splitlines()
