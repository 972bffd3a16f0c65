"""`golden serve`: with `--frontend sglang` and an SGLang environment that cannot start SGLang's
server, one error line naming the fix (exit 2, never a traceback); the engine's own server stops
when its parent dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import paths
from tests.support.processes import alive

BROKEN_SERVER = "import aiohttp_that_is_not_installed  # noqa\n"


def broken_sglang(root: Path) -> Path:
    """An `sglang` package whose HTTP server imports a module that is not installed, as SGLang's
    does (aiohttp) in a venv that cannot see the environment golden-replay is installed in."""
    pkg = root / "sglang"
    for sub in ("", "srt", "srt/entrypoints"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "srt/entrypoints/http_server.py").write_text(BROKEN_SERVER)
    return root


def serve(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", "serve", "--frontend", "sglang",
                           "--port", "39999"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, **env})


def test_a_broken_sglang_environment_is_one_line_naming_the_fix(tmp_path):
    site = broken_sglang(tmp_path / "site")
    res = serve({"PYTHONPATH": os.pathsep.join([str(site), str(paths.REPO)])}, tmp_path)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("error: SGLang's environment")
    assert "aiohttp_that_is_not_installed" in lines[-1]
    assert "bash scripts/install_sglang.sh" in lines[-1]
    assert "Traceback" not in res.stderr


def test_an_unfinished_sglang_venv_is_one_line_naming_the_fix(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)  # a venv whose install never finished
    res = serve({"GOLDEN_SGLANG_VENV": str(venv), "GOLDEN_SGLANG_PYTHON": ""}, tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error: SGLang's venv in {venv} is incomplete (its install never finished): run "
        "`bash scripts/install_sglang.sh`"]


# --- the engine's own server ---------------------------------------------------------------------

PARENT = ("import subprocess, sys; p = subprocess.Popen(sys.argv[1:]); print(p.pid, flush=True);"
          " p.wait()")


def test_golden_serve_stops_when_its_parent_dies(tmp_path):
    from replay.server.launch import free_port

    port = free_port()
    parent = subprocess.Popen([sys.executable, "-c", PARENT, sys.executable, "-m", "cli",
                               "serve", "--port", str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    server = int(parent.stdout.readline())
    try:
        assert "serving" in parent.stderr.readline()  # up and serving
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 30
        while alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(server)
    finally:
        if alive(server):
            os.kill(server, signal.SIGKILL)
