"""A launched server never outlives golden-replay, however golden-replay ends.

`launched` stops its server on every way out that runs Python code (success, errors,
KeyboardInterrupt; the CLI turns SIGTERM and SIGHUP into an interruption too). SIGKILL runs no
code, so each launch also has a watchdog: a tiny separate process, in its own session (out of
reach of the terminal's Ctrl-C and of a signal sent to golden-replay's process group), that
blocks reading a pipe whose only writer is golden-replay. When golden-replay stops the server
itself it writes one byte and the watchdog exits; when golden-replay dies, by any signal, the
kernel closes the pipe and the watchdog stops the server's whole process group (SIGTERM, the
profile's grace, SIGKILL) and removes the launch's scratch directory.

A parent-death signal (prctl PR_SET_PDEATHSIG) would not do: it reaches only the direct child
(often a `sh -c` wrapper, not the engine it starts), and fires when the *thread* that started the
child exits, not the process. The watchdog is started before the server and told the group id
afterwards, so no moment exists in which a server runs unwatched.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Runs with `python -I -S`: the standard library only, nothing of this package.
WATCHDOG = r"""
import os, shutil, signal, sys, time
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, signal.SIG_IGN)
grace, scratch = float(sys.argv[1]), sys.argv[2]
stdin = sys.stdin.buffer
line = stdin.readline()
if not line.strip().isdigit():
    sys.exit(0)  # the server never started
pgid = int(line)
if stdin.read(1):
    sys.exit(0)  # golden-replay stopped the server itself

def alive():
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True

try:
    os.killpg(pgid, signal.SIGTERM)
except (ProcessLookupError, PermissionError):
    pass
deadline = time.monotonic() + grace
while alive() and time.monotonic() < deadline:
    time.sleep(0.05)
try:
    os.killpg(pgid, signal.SIGKILL)
except (ProcessLookupError, PermissionError):
    pass
if scratch:
    shutil.rmtree(scratch, ignore_errors=True)
"""


@dataclass
class Watchdog:
    proc: subprocess.Popen[bytes]

    def watch(self, pgid: int) -> None:
        """From now on, the group `pgid` dies with golden-replay."""
        self._send(f"{pgid}\n".encode())

    def release(self) -> None:
        """The server was stopped here: the watchdog exits without touching anything."""
        self._send(b"x")
        self._close()

    def _send(self, data: bytes) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def _close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


def start_watchdog(grace: float, scratch: Path | None) -> Watchdog:
    """A watchdog waiting to be told which process group to guard (`Watchdog.watch`)."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", WATCHDOG, str(grace), str(scratch or "")],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return Watchdog(proc)


@contextlib.contextmanager
def watchdog(grace: float, scratch: Path | None):  # type: ignore[no-untyped-def]
    """`with watchdog(grace, scratch) as dog: proc = start(); dog.watch(proc.pid); ...`: the
    caller stops the server inside the block; leaving the block (any way) releases the dog."""
    dog = start_watchdog(grace, scratch)
    try:
        yield dog
    finally:
        dog.release()
