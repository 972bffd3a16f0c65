"""A reader that stops reading (`golden history | head -1`) ends golden quietly, exit 0.

`ls | head -1` prints its line and ends without a word: the reader has what it asked for. Python
ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError instead: typer's echo let it
through as "error: Broken pipe" (exit 2) and rich's console exited 1 (the FAIL code) on its own.
Both now end here: stdout (and stderr) are pointed at /dev/null, so that nothing, not even the
interpreter's last flush, writes to the closed pipe again, and the process exits 0.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from rich.console import Console


def end_quietly() -> NoReturn:
    """The reader is gone: no more output, exit 0 (what `ls | head -1` does)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # a stream without a file descriptor (a test's capture)
            pass
    raise SystemExit(0)


class PipeConsole(Console):
    """A rich console that raises BrokenPipeError on a closed pipe (rich's own exits 1), so a
    closed pipe ends the way it does for every other writer (`cli.options.exits_cleanly`)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError("the reader closed the pipe")
