"""Stop a launched server's whole process group, and tell whether any of it is still alive.

Deliberately synchronous (signals, /proc and waits); used by replay/server/launch.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

def stop_process_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the whole group, up to `grace` seconds for it to go, then SIGKILL.

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
        raise
    kill_group(proc, pgid)


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
