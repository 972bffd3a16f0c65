"""Who is listening: confirm that the server answering a launched port is the one launched.

The launcher picks a free port, then starts the server, which binds it seconds or minutes later
(SGLang loads the model first). Another process may take the port in between; the launched
server then fails to bind (or never gets that far) while the stranger answers health, warm-up and
the whole replay. So once the port answers, the listening sockets on it are looked up in the
kernel's tables (`/proc/net/tcp`, `/proc/net/tcp6`) and each must be held open by the launched
process or one of its descendants (their `/proc/PID/fd`). This needs nothing from the server,
so it holds for the embedded engine, SGLang (whose HTTP server may run in a child process),
vLLM and llama.cpp alike. Anything that cannot be confirmed (a stranger's socket, no listener
of ours, no /proc to read) is refused: it fails closed.
"""

from __future__ import annotations

import os
from pathlib import Path

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
PROC = Path("/proc")


class Unconfirmed(Exception):
    """The port's listener could not be confirmed as the launched process (one line)."""


class StrangerListening(Unconfirmed):
    """Another process holds the port: the launched server lost the race for it."""


def listening_inodes(port: int, proc: Path = PROC) -> set[int]:
    """The socket inodes listening on `port` (any address, IPv4 and IPv6)."""
    found: set[int] = set()
    read_any = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        read_any = True
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != LISTEN:
                continue
            local_port = int(cols[1].rsplit(":", 1)[1], 16)
            if local_port == port:
                found.add(int(cols[9]))
    if not read_any:
        raise Unconfirmed("cannot read /proc/net/tcp to see who listens on the port")
    return found


def someone_listens(port: int, proc: Path = PROC) -> bool:
    """Whether any process listens on `port` (False where /proc cannot tell)."""
    try:
        return bool(listening_inodes(port, proc))
    except Unconfirmed:
        return False


def descendants(root: int, proc: Path = PROC) -> set[int]:
    """`root` and every process descending from it (through /proc/PID/stat's parent field)."""
    parents: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rfind(")") + 2:].split()  # after "(comm)": state, ppid, ...
        if len(fields) > 1:
            parents[int(entry.name)] = int(fields[1])
    family, grew = {root}, True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in family and pid not in family:
                family.add(pid)
                grew = True
    return family


def socket_inodes(pids: set[int], proc: Path = PROC) -> set[int]:
    """The socket inodes the processes `pids` hold open."""
    inodes: set[int] = set()
    for pid in pids:
        fd_dir = proc / str(pid) / "fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(fd_dir / name)
            except OSError:
                continue
            if target.startswith("socket:[") and target.endswith("]"):
                inodes.add(int(target[8:-1]))
    return inodes


def confirm_listener(pid: int, port: int, proc: Path = PROC) -> None:
    """Return when every socket listening on `port` belongs to process `pid` or its
    descendants (and there is one); raise Unconfirmed saying why not."""
    listening = listening_inodes(port, proc)
    if not listening:
        raise Unconfirmed(f"nothing listens on port {port}, yet it answered")
    ours = socket_inodes(descendants(pid, proc), proc)
    strangers = listening - ours
    if strangers:
        raise StrangerListening(f"port {port} is held by a process golden did not launch "
                                "(another server took the port before the launched one bound it)")
