"""The launcher's process life cycle (replay/server/launch.py) against fake servers that
misbehave in the ways real ones do (its in-process parts: tests/unit/server/test_launch.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import time
from pathlib import Path

import pytest

from replay.server.transport import ServerClient
from replay.utils.errors import ServerError
from replay.server.launch import http_status, launched
from replay.server.profile import load_profile
from replay.server.process_group import group_members
from tests.data.fake_servers.helpers import fake_profile
from tests.support import paths

PY = sys.executable
FAKE_STUB = paths.DATA / "fake_servers" / "healthy_stub.py"


# --- process life cycle -------------------------------------------------------------------------


def launch_fake(tmp_path, script, **kw):
    profile = load_profile(fake_profile(tmp_path, script, **kw))
    return launched(profile, model=None, log_path=tmp_path / "logs" / f"{profile.name}.log")


def test_healthy_server_is_yielded_warm_and_stopped(tmp_path):
    with launch_fake(tmp_path, "healthy_stub.py") as url:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url)
        assert http_status("GET", url + "/health", timeout=5) == 200
        pgid = _pgid_of_server(url)
    assert http_status("GET", url + "/health", timeout=1) is None
    assert group_members(pgid) == []
    log = (tmp_path / "logs" / "healthy-stub.log").read_text()
    assert log.startswith("# golden-replay launch healthy-stub: ")
    assert "stub listening on" in log
    assert not [p for p in (tmp_path / "logs").iterdir() if "scratch" in p.name]


def test_server_that_dies_at_once_is_an_error_with_its_last_words(tmp_path):
    with pytest.raises(ServerError) as info:
        with launch_fake(tmp_path, "dies_at_once.py"):
            pytest.fail("must not be reached")
    message = str(info.value)
    assert "exited with code 3 before it became healthy" in message
    assert "CUDA out of memory (fake)" in message and "\n" not in message


def test_server_that_never_becomes_healthy_times_out_and_is_stopped(tmp_path):
    start = time.monotonic()
    with pytest.raises(ServerError) as info:
        with launch_fake(tmp_path, "never_healthy.py", startup_timeout=1.5, stop_timeout=2):
            pytest.fail("must not be reached")
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert "not healthy within 1.5 s" in message and "this will take forever" in message
    assert not _fake_processes("never_healthy.py")


def test_server_dying_mid_run_turns_the_client_error_into_its_exit(tmp_path):
    with pytest.raises(ServerError) as info:
        with launch_fake(tmp_path, "dies_mid_run.py") as url:
            asyncio.run(_generate(url, list(range(10, 30))))
    message = str(info.value)
    assert "exited with code 7 during the run" in message
    assert "illegal memory access in fake kernel" in message


def test_server_ignoring_sigterm_is_killed_with_its_whole_group(tmp_path):
    start = time.monotonic()
    with launch_fake(tmp_path, "ignores_sigterm.py", stop_timeout=0.5) as url:
        child = _child_pid(tmp_path / "logs" / "ignores-sigterm.log")
        pgid = os.getpgid(child)
        assert pgid == _pgid_of_server(url) and len(group_members(pgid)) == 2
    assert group_members(pgid) == []
    assert time.monotonic() - start < 15


def test_keyboard_interrupt_stops_the_server_and_propagates(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with launch_fake(tmp_path, "ignores_sigterm.py", stop_timeout=0.5) as url:
            pgid = _pgid_of_server(url)
            raise KeyboardInterrupt
    assert group_members(pgid) == []


def test_missing_executable_is_a_server_error(tmp_path):
    path = tmp_path / "nothing.toml"
    path.write_text('command = ["/no/such/server", "{port}"]\n')
    with pytest.raises(ServerError, match="cannot start launch profile 'nothing'"):
        with launched(load_profile(str(path)), model=None, log_path=tmp_path / "n.log"):
            pass


def test_embedded_reference_launches_and_answers_health(tmp_path):
    with launched(load_profile("embedded-reference"), model=None, log_path=tmp_path / "e.log") as url:
        assert http_status("GET", url + "/health", timeout=10) == 200
        info = asyncio.run(_server_info(url))
        assert info.get("disable_radix_cache") is True


# --- helpers ------------------------------------------------------------------------------------


async def _generate(url: str, ids: list[int]):
    async with ServerClient(url) as client:
        return await client.post("/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 2}}, "x")


async def _server_info(url: str):
    async with ServerClient(url) as client:
        return await client.get_json("/server_info")


def _pgid_of_server(url: str) -> int:
    """The process group of whatever listens on the URL's port (the launched server)."""
    port = int(url.rsplit(":", 1)[1])
    inode = _listening_inode(port)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            for fd in fds:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return os.getpgid(int(pid))
        except OSError:
            continue
    raise AssertionError(f"nothing listens on port {port}")


def _listening_inode(port: int) -> str:
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        parts = line.split()
        if int(parts[1].split(":")[1], 16) == port and parts[3] == "0A":  # LISTEN
            return parts[9]
    raise AssertionError(f"no listener on {port}")


def _child_pid(log: Path) -> int:
    for _ in range(100):
        match = re.search(r"fake child pid (\d+)", log.read_text())
        if match:
            return int(match.group(1))
        time.sleep(0.05)
    raise AssertionError("the fake did not report its child")


def _fake_processes(script: str) -> list[int]:
    """Live processes running the given fake server script."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if script.encode() in cmd and b"fake_servers" in cmd and state != "Z":
            found.append(int(pid))
    return found


def test_secrets_in_the_command_stay_out_of_the_log_header_and_messages(tmp_path):
    path = tmp_path / "secret.toml"
    script = paths.DATA / "fake_servers" / "dies_at_once.py"
    path.write_text(f'command = ["{{python}}", "{script}", "--api-key", "sekrit-123"]\n')
    with pytest.raises(ServerError) as info:
        with launched(load_profile(str(path)), model=None, log_path=tmp_path / "s.log"):
            pass
    assert "sekrit-123" not in (tmp_path / "s.log").read_text()
    assert "sekrit-123" not in str(info.value)


@contextlib.contextmanager
def stranger_on_a_port():
    """A server golden did not launch, healthy on a free port (yielded), killed afterwards."""
    import subprocess

    from replay.server import launch

    port = launch.free_port()
    stranger = subprocess.Popen([PY, str(FAKE_STUB), "--host", "127.0.0.1", "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while http_status("GET", f"http://127.0.0.1:{port}/health", timeout=1.0) != 200:
            assert time.monotonic() < deadline and stranger.poll() is None
            time.sleep(0.1)
        yield port
    finally:
        stranger.kill()
        stranger.wait()


def test_a_stranger_holding_the_launch_port_is_refused_not_replayed_against(tmp_path,
                                                                            monkeypatch):
    """The port race: another server takes the chosen port before the launched one binds it
    (here the launched one never binds, on any port); the stranger answers health and warm-up,
    and must not be taken for the launched server."""
    from replay.server import launch

    with stranger_on_a_port() as port:
        profile_path = tmp_path / "sleeper.toml"
        profile_path.write_text(f'command = ["{PY}", "-c", "import time; time.sleep(60)"]\n'
                                "startup_timeout = 20\nstop_timeout = 5\n")
        monkeypatch.setattr(launch, "free_port", lambda host=launch.LOOPBACK: port)
        with pytest.raises(ServerError, match="did not launch"):
            with launched(load_profile(str(profile_path)), model=None,
                          log_path=tmp_path / "sleeper.log"):
                pytest.fail("yielded the stranger's URL")


def test_a_launch_that_lost_its_port_to_a_stranger_starts_again_on_another_port(tmp_path,
                                                                              monkeypatch):
    """The same race, won on the second port: the launched server cannot bind the first (a
    stranger holds it) and is started again on a fresh one; the URL yielded is its own."""
    from replay.server import launch

    with stranger_on_a_port() as taken:
        real_free_port = launch.free_port
        ports = iter([taken])
        monkeypatch.setattr(launch, "free_port",
                            lambda host=launch.LOOPBACK: next(ports, None) or real_free_port(host))
        said: list[str] = []
        profile = load_profile(fake_profile(tmp_path, "healthy_stub.py"))
        with launched(profile, model=None, log_path=tmp_path / "stub.log",
                      notify=said.append) as url:
            assert not url.endswith(f":{taken}")
            assert http_status("GET", url + "/health", timeout=5.0) == 200
        assert any("starting it again on another port" in line for line in said)


def test_a_launched_server_listening_through_a_child_process_is_confirmed(tmp_path):
    """The listener may be a descendant of the launched process (sh -c, SGLang's workers)."""
    script = FAKE_STUB
    profile_path = tmp_path / "wrapped.toml"
    profile_path.write_text(
        f'command = ["sh", "-c", "{PY} {script} --host {{host}} --port {{port}}; exit 0"]\n'
        "startup_timeout = 20\nstop_timeout = 5\n")
    with launched(load_profile(str(profile_path)), model=None,
                  log_path=tmp_path / "wrapped.log") as url:
        assert http_status("GET", url + "/health", timeout=5.0) == 200
