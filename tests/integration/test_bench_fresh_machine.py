"""scripts/bench_fresh_machine.sh checks what "set-up that installs itself" asks: the README's two
commands in a venv made with a Python that has no torch (a base with torch is refused), run in
the foreground and again as a background job of a non-interactive shell (SIGINT ignored), each
exiting 0 with nothing skipped. Rehearsed here with stand-in commands (GOLDEN_FRESH_COMMAND_1/2),
so the clone, the venv and both passes run in seconds; the real run takes over an hour
(docs/benchmarks.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import paths
from tests.support.signals import sigint_as_from_a_terminal

SCRIPT = paths.REPO / "scripts" / "bench_fresh_machine.sh"
SIGINT_IGNORED = "python -c 'import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)'"
README_COMMANDS = ('pip install "torch==2.13.0" -e ".[engine,test]" && golden demo',
                   "bash scripts/test.sh")


def python_without_torch(tmp_path: Path) -> Path:
    """This interpreter with no site-packages: the standard library (venv) and no torch."""
    wrapper = tmp_path / "python-without-torch"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def bench(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300,
                          preexec_fn=sigint_as_from_a_terminal)


def test_a_base_python_with_torch_is_refused_before_anything_is_made(tmp_path):
    work = tmp_path / "work"
    result = bench(tmp_path, str(work), GOLDEN_FRESH_PYTHON=sys.executable)  # has torch
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: ") and "has torch" in result.stderr
    assert not work.exists()


def test_the_dry_run_plans_the_readmes_commands_in_the_foreground_and_the_background(tmp_path):
    result = bench(tmp_path, "--dry-run", str(tmp_path / "work"),
                   GOLDEN_FRESH_PYTHON=str(python_without_torch(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert all(command in result.stdout for command in README_COMMANDS)
    assert "pass background: bash -c 'CMD & wait'" in result.stdout
    assert not (tmp_path / "work").exists()


def test_both_passes_run_and_the_second_is_a_background_job_with_sigint_ignored(tmp_path):
    work = tmp_path / "work"
    result = bench(tmp_path, str(work), GOLDEN_FRESH_PYTHON=str(python_without_torch(tmp_path)),
                   GOLDEN_FRESH_COMMAND_1="echo '== 3 passed in 0.1s =='",
                   GOLDEN_FRESH_COMMAND_2=SIGINT_IGNORED)
    assert result.returncode == 0, result.stdout + result.stderr
    logs = work / "logs"
    assert (logs / "foreground-command-2.log").read_text() == "False\n"
    assert (logs / "background-command-2.log").read_text() == "True\n"
    assert result.stdout.count(": exit 0, ") == 4


def test_a_skipped_test_fails_the_run(tmp_path):
    result = bench(tmp_path, str(tmp_path / "work"),
                   GOLDEN_FRESH_PYTHON=str(python_without_torch(tmp_path)),
                   GOLDEN_FRESH_COMMAND_1="true",
                   GOLDEN_FRESH_COMMAND_2="echo '== 3 passed, 1 skipped in 0.2s =='")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "SKIPPED: == 3 passed, 1 skipped in 0.2s ==" in result.stdout
