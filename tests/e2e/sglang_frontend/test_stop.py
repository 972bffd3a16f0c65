"""`golden serve --frontend sglang` stops with its whole process tree (SGLang's server, its
detokenizer, the engine's scheduler process, multiprocessing's tracker) when it is sent SIGTERM
or its parent dies: no process left, the port closed. One front end each (25-90 s to start on 2
cores). Needs SGLang: `bash scripts/install_sglang.sh` (scripts/test.sh runs it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from replay.server.launch import free_port
from replay.sglang_frontend.locate import install_hint, sglang_python
from tests.support import paths
from tests.support.processes import alive

pytestmark = pytest.mark.skipif(sglang_python() is None, reason=install_hint())

STARTUP = 300  # seconds, on a busy 2-core machine
GOLDEN = [sys.executable, "-m", "cli", "serve", "--frontend", "sglang"]
# A parent that starts `golden serve`, says its pid, and waits to be killed.
PARENT = ("import subprocess, sys; p = subprocess.Popen(sys.argv[1:]); print(p.pid, flush=True);"
          " p.wait()")


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`, read from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] not in ("Z", "X"):
                parents[int(entry)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        children = [c for c, p in parents.items() if p in frontier]
        found += children
        frontier = children
    return found




def wait_healthy(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the front end exited with {proc.returncode}"
        if healthy(port):
            return
        time.sleep(1)
    raise AssertionError(f"no /health on port {port} after {STARTUP} s")


def left_alive(pids: list[int], within: float) -> list[int]:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_sigterm_stops_the_front_end_and_all_its_processes(tmp_path):
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([*GOLDEN, "--port", str(port)], cwd=paths.REPO, stdout=log,
                            stderr=subprocess.STDOUT)
    tree: list[int] = []
    try:
        wait_healthy(port, proc)
        tree = descendants(proc.pid)
        assert len(tree) >= 3, f"expected SGLang's child processes, found {tree}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert left_alive(tree, within=5) == []
        assert not healthy(port)
    finally:
        kill_all([proc.pid, *tree])


def test_the_parents_death_stops_the_front_end_and_all_its_processes(tmp_path):
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    parent = subprocess.Popen([sys.executable, "-c", PARENT, *GOLDEN, "--port", str(port)],
                              cwd=paths.REPO, stdout=subprocess.PIPE, stderr=log, text=True)
    front_end = int(parent.stdout.readline())
    tree: list[int] = []
    try:
        wait_healthy(port, parent)
        tree = [front_end, *descendants(front_end)]
        parent.kill()
        parent.wait()
        assert left_alive(tree, within=30) == []
        assert not healthy(port)
    finally:
        kill_all([parent.pid, *tree])
