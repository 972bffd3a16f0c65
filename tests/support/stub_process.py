"""The protocol stub as a launched server (`python -m tests.support.stub_process --port P`), for
tests that need a real launch without an engine: a launch profile (a TOML file the test writes)
starts it like any server.

Its /server_info reports what two launches of one configuration never share (its host and port,
its pid, its launch command, a random seed, a temporary directory) beside settings that are
stable, so a test can check that a history keys servers by the latter only.
- `--drift-file F`: while F exists, every answer drifts by one ulp at output position 2 (a
  request that flips between two launches, whatever the order the requests arrive in).
- `--env-out F`: writes the environment it was started with to F (JSON) before it serves.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.stub_server import StubConfig, StubServer


def drift(resp: dict[str, Any]) -> dict[str, Any]:
    entry = resp["meta_info"]["output_token_logprobs"][2]
    entry[0] = float(np.nextafter(np.float32(entry[0]), np.float32(0)))
    return resp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--version", default="0.5.23")
    parser.add_argument("--drift-file", type=Path)
    parser.add_argument("--env-out", type=Path)
    args = parser.parse_args()
    if args.env_out:
        args.env_out.write_text(json.dumps(dict(os.environ)))
    scratch = tempfile.mkdtemp(prefix="stub-scratch-")
    info = {"version": args.version, "host": "127.0.0.1", "port": args.port, "pid": os.getpid(),
            "launch_command": " ".join(sys.argv), "random_seed": random.randrange(2**31),
            "hicache_storage_dir": scratch, "enable_hierarchical_cache": True,
            "hicache_write_policy": "write_through"}
    drift_file = args.drift_file

    def tamper(n: int, ids: list[int], resp: dict[str, Any]) -> dict[str, Any]:
        return drift(resp) if drift_file is not None and drift_file.exists() else resp

    StubServer(StubConfig(port=args.port, extra_server_info=info, tamper=tamper)).start()
    threading.Event().wait()  # until the launcher stops the process group


if __name__ == "__main__":
    main()
