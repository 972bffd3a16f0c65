"""Signal a real `golden record --launch PROFILE` while its launched server is serving, and see
what is left: the end-to-end check that a real engine's whole process tree (SGLang's HTTP
server, scheduler and detokenizer; vLLM's API server and EngineCore) stops with golden, on
SIGTERM, SIGINT and golden's own death (SIGKILL: the launch's watchdog stops it).

The server is known to be serving once golden prints its first progress line (plain lines off a
terminal); the scenario is long enough (16 requests of 256 new tokens, one at a time) that the
recording is still running then. The server's processes are every process below golden at that
moment, read from /proc (golden itself and its watchdog included).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from replay.server.listener import descendants
from tests.support import paths
from tests.support.signals import sigint_as_from_a_terminal
from tests.support.processes import alive

# Long enough to be still recording when the first progress line comes; token ids below 2048 fit
# every tiny model's vocabulary (SGLang CPU's 4096, the HF ones' 2048).
LONG_SCENARIO = """groups = 2
branches = 2
prefix_len = 256
suffix_len = 16
turns = 3
turn_suffix_len = 16
max_new_tokens = 256
token_lo = 3
token_hi = 2048
top_k = 3
seed = 0
"""


@dataclass(frozen=True)
class Signalled:
    returncode: int
    stderr: str
    tree: frozenset[int]  # golden's descendants (the server's processes) when it was signalled
    left: frozenset[int]  # those still alive `within` seconds after golden ended
    commands: tuple[str, ...]  # the tree's command lines when it was signalled

    def has_process(self, fragment: str) -> bool:
        return any(fragment in command for command in self.commands)




def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def still_alive(pids: frozenset[int], within: float) -> frozenset[int]:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return frozenset(p for p in pids if alive(p))


def record_and_signal(work: Path, profile: str, model: str, sig: signal.Signals, *,
                      startup: float = 400.0, within: float = 60.0) -> Signalled:
    """Start `golden record --launch profile`, signal it once it is recording, and report."""
    scenario = work / "long.toml"
    scenario.write_text(LONG_SCENARIO)
    stderr_path = work / "golden.stderr"
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "record", "--launch", profile, "--model", model,
             "--scenario", str(scenario), "--out", str(work / "out.zarr"), "--concurrency", "1",
             "--log-dir", str(work / "logs")],
            cwd=paths.REPO, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
            preexec_fn=sigint_as_from_a_terminal)
    tree: frozenset[int] = frozenset()
    commands: tuple[str, ...] = ()
    try:
        deadline = time.monotonic() + startup
        while " done, " not in stderr_path.read_text():
            if proc.poll() is not None:
                raise AssertionError(f"golden ended (exit {proc.returncode}) before recording: "
                                     f"{stderr_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"golden printed no progress within {startup} s")
            time.sleep(0.5)
        tree = frozenset(descendants(proc.pid) - {proc.pid})
        commands = tuple(command_line(pid) for pid in sorted(tree))
        proc.send_signal(sig)
        proc.wait(timeout=within)
        left = still_alive(tree, within)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in (descendants(proc.pid) - {proc.pid}) | tree:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    return Signalled(proc.returncode, stderr_path.read_text(), tree, left, commands)
