"""Whether a process still runs, from /proc (a zombie or a dead one does not)."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] not in ("Z", "X")
