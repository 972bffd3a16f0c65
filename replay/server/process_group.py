"""Stop a launched server's whole process group, and tell whether any of it is still alive.

A process group is not enough on its own: a server may start helpers that leave it (setsid, a
double fork, a daemonizing tool). Every launched server therefore carries a marker in its
environment (`GOLDEN_REPLAY_LAUNCH=<id>`, unique per launch), which every descendant inherits
however far it moves; `marked_processes` finds them through /proc/*/environ, and stopping a
server stops them too. (A descendant that execs with a scrubbed environment, or runs in a
container started through a daemon, escapes both; docs/reliability.md.)

Deliberately synchronous (signals, /proc and waits); used by replay/server/launch.py.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

MARKER_ENV = "GOLDEN_REPLAY_LAUNCH"  # in every launched server's environment: MARKER_ENV=<id>


def new_marker() -> str:
    """A launch id no other launch (of this or any other golden-replay) shares."""
    return f"{os.getpid()}-{secrets.token_hex(8)}"


def marked_processes(marker: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds `MARKER_ENV=marker`: a launched
    server and all its descendants, in its process group or not."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone, or another user's
            continue
        if needle in environ.split(b"\0") and stat[stat.rfind(")") + 2:][:1] not in ("Z", "X"):
            found.append(int(entry))
    return found


def stop_marked(marker: str, grace: float) -> None:
    """SIGTERM every process carrying the marker, up to `grace` seconds, then SIGKILL."""
    if not os.path.isdir("/proc/self"):
        return
    _signal_all(marked_processes(marker), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal_all(marked_processes(marker), signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)

def stop_process_group(proc: subprocess.Popen[bytes], grace: float,
                       marker: str | None = None) -> None:
    """SIGTERM to the whole group, up to `grace` seconds for it to go, then SIGKILL; then the
    same for any process carrying the launch's `marker` that left the group.

    The group, not just the leader: servers such as SGLang run schedulers and detokenizers in
    child processes, and a leader that exits on SIGTERM may leave them holding the GPU. A second
    Ctrl-C while waiting skips straight to SIGKILL.
    """
    pgid = proc.pid  # start_new_session made the leader its group's id
    try:
        signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        _reap_leader(proc, deadline)
        _wait_group_gone(pgid, deadline)
    except KeyboardInterrupt:
        kill_group(proc, pgid)
        if marker:
            stop_marked(marker, 0.0)
        raise
    kill_group(proc, pgid)
    if marker:
        stop_marked(marker, grace)


def exited_soon(proc: subprocess.Popen[bytes], within: float) -> bool:
    """Whether the server exits within `within` seconds. A client sees the connection drop
    while the dying process is still tearing down, so a plain poll() would race it."""
    try:
        proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        return False
    return True


def kill_group(proc: subprocess.Popen[bytes], pgid: int) -> None:
    if group_alive(pgid):
        signal_group(pgid, signal.SIGKILL)
    proc.wait()
    _wait_group_gone(pgid, time.monotonic() + 5.0)


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc.

    Zombies are skipped: an orphan's exit status is collected by whatever reaps orphans here (not
    always a real init), and a zombie holds no resources, so waiting for it would be pointless.
    """
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def group_alive(pgid: int) -> bool:
    if os.path.isdir("/proc/self"):
        return bool(group_members(pgid))
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _reap_leader(proc: subprocess.Popen[bytes], deadline: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(0.0, _left(deadline)))


def _wait_group_gone(pgid: int, deadline: float) -> None:
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _left(deadline: float) -> float:
    return deadline - time.monotonic()
