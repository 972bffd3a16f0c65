"""A reader that stops reading (`golden history | head -1`) ends golden quietly, exit 0.

`ls | head -1` prints its line and ends without a word: the reader has what it asked for. Python
ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError instead: typer's echo let it
through as "error: Broken pipe" (exit 2) and rich's console exited 1 (the FAIL code) on its own.
Both now end here: stdout (and stderr) are pointed at /dev/null, so that nothing, not even the
interpreter's last flush, writes to the closed pipe again, and a listing command exits 0. A
command with a verdict (replay, diff, matrix...) exits 2 instead: its verdict was not written,
and a closed pipe must never read as a pass.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from rich.console import Console


NO_VERDICT = "error: the output pipe was closed before the verdict was written\n"


def end_quietly(listing: bool) -> NoReturn:
    """The reader is gone: no more output; exit 0 for a listing (what `ls | head -1` does),
    else one line on stderr (if it is still open) and exit 2: no verdict was delivered."""
    if not listing:
        try:
            os.write(sys.stderr.fileno(), NO_VERDICT.encode())
        except (OSError, ValueError):
            pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # a stream without a file descriptor (a test's capture)
            pass
    raise SystemExit(0 if listing else 2)


class PipeConsole(Console):
    """A rich console that raises BrokenPipeError on a closed pipe (rich's own exits 1), so a
    closed pipe ends the way it does for every other writer (`cli.options.exits_cleanly`)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError("the reader closed the pipe")
