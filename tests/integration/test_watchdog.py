"""The watchdog stops a launched server when golden-replay dies, even before it was told the
server's process group, and finds the server's processes that left the group by their marker."""

from __future__ import annotations

import os
import subprocess
import sys

from replay.server.guard import start_watchdog
from replay.server.process_group import MARKER_ENV, marked_processes, new_marker


def marked_sleeper(marker: str) -> subprocess.Popen[bytes]:
    """A process in its own session carrying the launch marker, as a launched server does."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            env={**os.environ, MARKER_ENV: marker}, start_new_session=True)


def test_a_server_golden_died_before_handing_over_still_dies():
    marker = new_marker()
    dog = start_watchdog(0.5, None, marker)
    server = marked_sleeper(marker)
    try:
        assert dog.proc.stdin is not None
        dog.proc.stdin.close()  # golden died before `watch`: the kernel closes the pipe
        assert server.wait(timeout=20) < 0  # killed by a signal
    finally:
        server.kill()
        dog.proc.wait(timeout=20)


def test_a_released_watchdog_touches_nothing():
    marker = new_marker()
    dog = start_watchdog(0.5, None, marker)
    server = marked_sleeper(marker)
    try:
        dog.release()  # golden stopped the server itself (here: it did not, on purpose)
        assert dog.proc.wait(timeout=20) == 0 and server.poll() is None
    finally:
        server.kill()
        server.wait()


def test_marked_processes_are_found_whatever_their_group():
    marker = new_marker()
    server = marked_sleeper(marker)
    try:
        assert marked_processes(marker) == [server.pid]
        assert marked_processes(new_marker()) == []
    finally:
        server.kill()
        server.wait()
