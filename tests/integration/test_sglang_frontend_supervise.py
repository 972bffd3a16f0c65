"""The front end's supervisor stops its server's whole process group: on SIGTERM, SIGINT, SIGHUP
and its parent's death, including a grandchild that ignores SIGTERM (as SGLang's tracker does)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.processes import alive

# The "server": writes its pid and a stubborn grandchild's pid, then waits forever.
SERVER = textwrap.dedent("""
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    with open(sys.argv[1], "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    time.sleep(600)
""")
SUPERVISOR = ("import os, sys; from replay.sglang_frontend.supervise import supervise; "
              "sys.exit(supervise([sys.executable, '-c', sys.argv[1], sys.argv[2]], dict(os.environ),"
              " grace=1.0))")
# A parent that starts the supervisor, says its pid, and waits to be killed.
PARENT = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', *sys.argv[1:]]);"
          " print(p.pid, flush=True); time.sleep(600)")




def wait_for(path: Path) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return [int(p) for p in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError("the server never started")


def all_gone(pids: list[int], within: float) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def cleanup(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=paths.REPO, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(paths.REPO)))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_stops_the_servers_whole_process_group(sig, tmp_path):
    pids_file = tmp_path / "pids"
    supervisor = start([sys.executable, "-c", SUPERVISOR, SERVER, str(pids_file)])
    pids = wait_for(pids_file)
    try:
        supervisor.send_signal(sig)
        assert supervisor.wait(timeout=20) == 0
        assert all_gone(pids, within=5), f"still alive: {[p for p in pids if alive(p)]}"
    finally:
        cleanup([supervisor.pid, *pids])


def test_the_parents_death_stops_the_servers_whole_process_group(tmp_path):
    pids_file = tmp_path / "pids"
    parent = start([sys.executable, "-c", PARENT, SUPERVISOR, SERVER, str(pids_file)])
    supervisor = int(parent.stdout.readline())
    pids = wait_for(pids_file)
    try:
        parent.kill()
        parent.wait()
        assert all_gone([supervisor, *pids], within=20), \
            f"still alive: {[p for p in [supervisor, *pids] if alive(p)]}"
    finally:
        cleanup([supervisor, *pids])


def test_a_server_that_exits_on_its_own_gives_its_exit_code(tmp_path):
    code = subprocess.call([sys.executable, "-c", SUPERVISOR, "import sys; sys.exit(3)", "x"],
                           cwd=paths.REPO, env=dict(os.environ, PYTHONPATH=str(paths.REPO)))
    assert code == 3
