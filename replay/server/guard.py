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
child exits, not the process. The watchdog is started before the server, with the launch's
marker (replay/server/process_group.py: every process of the launch, in its group or one that
left it by setsid or a double fork, carries it in its environment), and told the group id once
the server runs. So no moment exists in which a server runs unwatched: if golden-replay dies
between starting the server and telling its group (a SIGKILL there), the watchdog still finds
the server by its marker; and helpers that left the group die with it.
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
grace, scratch, marker = float(sys.argv[1]), sys.argv[2], sys.argv[3]
needle = ("GOLDEN_REPLAY_LAUNCH=" + marker).encode()
stdin = sys.stdin.buffer
line = stdin.readline()
if line == b"x":
    sys.exit(0)  # golden-replay stopped the server itself before telling its group
pgid = int(line) if line.strip().isdigit() else None  # None: golden died before telling it
if pgid is not None and stdin.read(1):
    sys.exit(0)  # golden-replay stopped the server itself

def marked():
    found = []
    for entry in os.listdir("/proc") if marker and os.path.isdir("/proc/self") else ():
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open("/proc/%s/environ" % entry, "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass
    return found

def group_alive():
    if pgid is None:
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True

def hit(sig):
    if pgid is not None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in marked():
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

hit(signal.SIGTERM)
deadline = time.monotonic() + grace
while group_alive() and time.monotonic() < deadline:
    time.sleep(0.05)
while marked() and time.monotonic() < deadline:
    time.sleep(0.05)
if scratch and not group_alive():
    shutil.rmtree(scratch, ignore_errors=True)  # at once when the group went on SIGTERM
hit(signal.SIGKILL)
if scratch:
    shutil.rmtree(scratch, ignore_errors=True)
# A server forked just before golden-replay died may still be exec'ing into its marked
# environment: look again until a second has passed with nothing marked alive.
quiet_since = time.monotonic()
while time.monotonic() - quiet_since < 1.0:
    time.sleep(0.1)
    if group_alive() or marked():
        hit(signal.SIGKILL)
        quiet_since = time.monotonic()
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


def start_watchdog(grace: float, scratch: Path | None, marker: str = "") -> Watchdog:
    """A watchdog waiting to be told which process group to guard (`Watchdog.watch`); from the
    start it also guards every process whose environment carries the launch `marker`."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", WATCHDOG, str(grace), str(scratch or ""), marker],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return Watchdog(proc)


@contextlib.contextmanager
def watchdog(grace: float, scratch: Path | None, marker: str = ""):  # type: ignore[no-untyped-def]
    """`with watchdog(grace, scratch, marker) as dog: proc = start(); dog.watch(proc.pid); ...`:
    the caller stops the server inside the block; leaving the block (any way) releases the dog."""
    dog = start_watchdog(grace, scratch, marker)
    try:
        yield dog
    finally:
        dog.release()
