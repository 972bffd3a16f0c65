"""The `golden` console script (and `python -m cli`): the first code of ours that runs.

A Ctrl-C can arrive before any command's error handling exists: while the interpreter imports
typer and the command modules (cli.startup_interrupt ends the process at once then), or
while the arguments are parsed (typer turns that one into a silent exit 130). Each ends as the
one line every other interruption gives, and exit 2: an interrupted run reached no verdict. Kept
free of other imports until the handler is in place.
"""

from __future__ import annotations

import os
import sys

from cli import startup_interrupt
from cli.startup_interrupt import INTERRUPTED

TYPER_INTERRUPTED = 130  # typer's exit code for a KeyboardInterrupt outside the command


def main() -> None:
    startup_interrupt.arm()
    try:
        from cli.main import app

        app(prog_name="golden")
    except KeyboardInterrupt:
        interrupted()
    except SystemExit as exc:
        if exc.code == TYPER_INTERRUPTED:
            interrupted()
        raise


def interrupted() -> None:
    os.write(sys.stderr.fileno(), (INTERRUPTED + "\n").encode())
    raise SystemExit(2)
