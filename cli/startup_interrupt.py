"""Ctrl-C while `golden` itself starts: the one line and exit 2, whatever Python is running.

Until a command begins, a Ctrl-C raises KeyboardInterrupt wherever the interpreter happens to be,
and during imports that is sometimes inside a callback whose exceptions Python cannot raise (the
weakref callback of importlib's module locks): it prints "Exception ignored in ..." and goes on,
so the Ctrl-C is lost and golden runs to its end (seen in a fresh-machine run: the interrupted
start-up then failed on its unreachable server instead). Nothing has been done yet at that point
(no server started, no file written), so until the command begins a Ctrl-C ends the process at
once, from a handler that raises nothing: `arm()` installs it (cli.entry, before any other
import), `disarm()` gives Ctrl-C back to Python's KeyboardInterrupt when the command begins (the
app's callback), where every command's own handling takes over (servers stopped, error reports).
An inherited "ignore" (`nohup golden ... &`) is left alone. Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = "error: interrupted (Ctrl-C)"


def _end_now(signum: int, frame: object) -> None:
    os.write(sys.stderr.fileno(), (INTERRUPTED + "\n").encode())
    os._exit(2)


def arm() -> None:
    """From here until `disarm()`, a Ctrl-C ends golden at once (unless SIGINT is ignored)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _end_now)


def disarm() -> None:
    """Ctrl-C raises KeyboardInterrupt again (only if `arm()` had taken it)."""
    if signal.getsignal(signal.SIGINT) is _end_now:
        signal.signal(signal.SIGINT, signal.default_int_handler)
