"""The front end stops as one tree: a small supervisor process owns SGLang's server.

SGLang's server process runs its detokenizer, the engine's scheduler process and
multiprocessing's resource tracker as children, and on SIGTERM its HTTP server starts a graceful
shutdown that can leave them (and the port) alive. So `python -m replay.sglang_frontend` runs the
server as a child in a process group of its own and stays in front of it: on SIGTERM, SIGINT or
SIGHUP, or when its own parent dies, it sends SIGTERM to that whole group, waits up to `grace`
seconds, then SIGKILLs what is left. Should the supervisor itself be SIGKILLed, the server gets
SIGKILL from the kernel (PR_SET_PDEATHSIG, set by this single-threaded process's main thread), and
SGLang's children follow their parent (SGLang's own parent-death signal, the scheduler's parent
watch, the tracker's closed pipe).

Standard library only: it runs before SGLang is imported.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def supervise(argv: list[str], env: dict[str, str], grace: float = 10.0) -> int:
    """Run `argv` in a process group of its own until it exits or this process is asked to stop
    (a signal, or its parent's death); then stop the whole group. The child's exit code, or 0
    when the stop was asked for."""
    stop = threading.Event()
    asked: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        asked.append(signum)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    parent = os.getppid()
    try:
        proc = subprocess.Popen(argv, env=env, process_group=0, preexec_fn=_die_with_parent)
        try:
            while proc.poll() is None and not stop.wait(0.2):
                if os.getppid() != parent:  # our parent died: nobody is left to stop us
                    asked.append(0)
                    break
        finally:
            stop_group(proc, grace)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0 if asked else (proc.returncode or 0)


def stop_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the child's whole group, up to `grace` seconds for it to go, then SIGKILL."""
    pgid = proc.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_group(pgid, signal.SIGKILL)
    proc.wait()


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the supervisor dies, however it dies."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is left in the group (zombies hold nothing)."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # "pid (comm) state ppid pgrp ..."
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False
