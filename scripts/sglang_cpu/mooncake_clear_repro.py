"""The smallest reproduction of SGLang 0.5.23's Mooncake clear finding (docs/sglang-cpu.md), without
SGLang or golden-replay: what `MooncakeStore.clear()` does (`store.remove_all()`, no `force`)
leaves every object read within the master's lease (default_kv_lease_ttl, 10 s; 3 s here).

    python scripts/sglang_cpu/mooncake_clear_repro.py    # in the venv of install_sglang_cpu.sh

Starts `mooncake_master` on free loopback ports, one client over TCP (P2P handshake, a 16 MB
segment and a 16 MB local buffer), and four times puts one object and then: remove_all(); a
read, remove_all(); a read, the lease's expiry, remove_all(); a read, remove_all(force=True).
Prints what each removed and whether the object survived. Seen (0.3.13.post1): only the read
object survives the plain remove_all(), which reports 0 removed; SGLang ignores that count.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    from mooncake.store import MooncakeDistributedStore

    rpc, metrics, lease_ms = free_port(), free_port(), 3000
    master = subprocess.Popen([str(Path(sys.executable).parent / "mooncake_master"),
                               f"--rpc_port={rpc}", "--rpc_address=127.0.0.1",
                               f"--metrics_port={metrics}", "--metrics_host=127.0.0.1",
                               f"--default_kv_lease_ttl={lease_ms}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        store = MooncakeDistributedStore()
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                           f"127.0.0.1:{rpc}") == 0
        for step in ("put, remove_all()", "put, get, remove_all()",
                     "put, get, lease expired, remove_all()", "put, get, remove_all(force=True)"):
            assert store.put("page", b"x" * 4096) == 0
            if "get" in step:  # a read grants the object a lease (as a prefetch's read does)
                assert len(store.get("page")) == 4096
            if "expired" in step:
                time.sleep(lease_ms / 1000 + 1)
            removed = store.remove_all(force="force" in step)
            print(f"{step}: removed {removed}, object still there: {bool(store.is_exist('page'))}")
            store.remove_all(force=True)
        return 0
    finally:
        master.terminate()
        master.wait(10)


if __name__ == "__main__":
    sys.exit(main())
