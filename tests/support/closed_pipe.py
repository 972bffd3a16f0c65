"""`golden ARGS` writing into a pipe whose reader is gone, as after `golden ... | head -1`.

The read end is closed before the command writes anything, so every write it makes meets the
closed pipe (a reader that closes after reading its line races the writer: the output may all
fit in the pipe's buffer first, and nothing would be tested).
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import paths


def into_closed_pipe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `python -m cli ARGS` with stdout a pipe nobody reads; stderr is captured."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "cli", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120, cwd=paths.REPO,
                              env={**os.environ, "PYTHONPATH": str(paths.REPO), **(env or {})})
    finally:
        os.close(write_end)
