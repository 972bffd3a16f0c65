"""The launcher: profiles (parsing, rendering, the built-ins' exact argv) and the process life
cycle against fake servers that misbehave in the ways real ones do."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from replay.server.transport import ServerClient
from replay.utils.errors import ServerError, UsageError
from replay.server.launch import (
    attention_choice, builtin_profile_names, http_status, launched, load_profile, log_tail,
    parse_profile, render,
)
from replay.server.process_group import group_members
from tests.data.fake_servers.helpers import fake_profile
from tests.support import paths

PY = sys.executable
FAKE_STUB = paths.DATA / "fake_servers" / "healthy_stub.py"
SG = [PY, "-m", "sglang.launch_server", "--model-path", "/models/M", "--host", "127.0.0.1",
      "--port", "30000"]
PINNED = ["--attention-backend", "fa4", "--page-size", "128", "--chunked-prefill-size", "2048"]
SEED_SHAPE = PINNED + [
    "--mamba-track-interval", "128", "--max-total-tokens", "4096", "--mem-fraction-static", "0.85",
    "--max-running-requests", "4", "--max-mamba-cache-size", "500",
    "--enable-hierarchical-cache", "--hicache-ratio", "4"]
NPU_SHAPE = ["--device", "npu", "--page-size", "128", "--chunked-prefill-size", "2048"]

# The exact command line of every built-in SGLang profile, rendered with --attention-backend fa4
# (SGLang's own parser and flag resolution check them: tests/e2e/sglang_frontend/test_profiles.py).
EXPECTED_SGLANG_ARGV = {
    "sglang-reference": SG + PINNED + ["--disable-radix-cache", "--disable-overlap-schedule",
                                       "--enable-deterministic-inference"],
    "sglang-hicache-seed": SG + SEED_SHAPE + [
        "--hicache-write-policy", "write_through", "--hicache-io-backend", "direct",
        "--hicache-mem-layout", "page_first_direct", "--enable-deterministic-inference"],
    "sglang-hicache-seed-retract": SG + SEED_SHAPE + [
        "--hicache-write-policy", "write_through", "--hicache-io-backend", "direct",
        "--hicache-mem-layout", "page_first_direct", "--enable-deterministic-inference"],
    "sglang-hicache-write-back": SG + SEED_SHAPE + [
        "--hicache-write-policy", "write_back", "--hicache-io-backend", "direct",
        "--hicache-mem-layout", "page_first_direct", "--enable-deterministic-inference"],
    "sglang-hicache-kernel-io": SG + SEED_SHAPE + [
        "--hicache-write-policy", "write_through", "--hicache-io-backend", "kernel",
        "--hicache-mem-layout", "page_first", "--enable-deterministic-inference"],
    "sglang-hicache-layer-first": SG + SEED_SHAPE + [
        "--hicache-write-policy", "write_through", "--hicache-io-backend", "direct",
        "--hicache-mem-layout", "layer_first", "--enable-deterministic-inference"],
    "sglang-hicache-file-storage": SG + SEED_SHAPE + [
        "--hicache-write-policy", "write_through", "--hicache-io-backend", "direct",
        "--hicache-mem-layout", "page_first_direct", "--hicache-storage-backend", "file",
        "--hicache-storage-prefetch-policy", "wait_complete", "--enable-deterministic-inference"],
    "sglang-npu-reference": SG + NPU_SHAPE + [
        "--disable-radix-cache", "--disable-overlap-schedule", "--enable-deterministic-inference"],
    "sglang-npu-hicache": SG + NPU_SHAPE + [
        "--mamba-track-interval", "128", "--max-total-tokens", "4096", "--max-running-requests", "4",
        "--enable-hierarchical-cache", "--hicache-ratio", "4",
        "--hicache-write-policy", "write_through", "--enable-deterministic-inference"],
}
NPU = ["sglang-npu-reference", "sglang-npu-hicache"]
# SGLang's real server on a CPU (docs/sglang-cpu.md): the launcher module, the same numerics pins.
CPU_PIN = [PY, "-m", "replay.sglang_cpu", "--model-path", "/models/M", "--host", "127.0.0.1",
           "--port", "30000", "--device", "cpu", "--attention-backend", "torch_native",
           "--sampling-backend", "pytorch", "--disable-cuda-graph", "--skip-tokenizer-init",
           "--random-seed", "0", "--page-size", "128", "--chunked-prefill-size", "2048"]
EXPECTED_CPU_ARGV = {
    "sglang-cpu-reference": CPU_PIN + ["--max-total-tokens", "16384", "--disable-radix-cache",
                                       "--disable-overlap-schedule"],
    "sglang-cpu-radix": CPU_PIN + ["--max-total-tokens", "4096"],
    "sglang-cpu-hicache": CPU_PIN + [
        "--max-total-tokens", "4096", "--enable-hierarchical-cache", "--hicache-ratio", "4",
        "--hicache-write-policy", "write_through", "--hicache-io-backend", "direct",
        "--hicache-mem-layout", "page_first_direct"],
}
PD_PREFILL = ["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "mooncake_tcp"]
EXPECTED_CPU_ARGV |= {  # the halves of the pd-cpu topologies (docs/topologies.md)
    "pd-cpu-prefill": EXPECTED_CPU_ARGV["sglang-cpu-radix"] + PD_PREFILL,
    "pd-cpu-prefill-hicache": EXPECTED_CPU_ARGV["sglang-cpu-hicache"] + PD_PREFILL,
    "pd-cpu-decode": CPU_PIN + ["--max-total-tokens", "16384", "--disaggregation-mode", "decode",
                                "--disaggregation-transfer-backend", "mooncake_tcp"],
}
EMBEDDED = ["reference", "radix", "hicache", "hicache-write-back", "hicache-layer-first",
            "hicache-storage"]


VLLM = ["vllm-reference", "vllm-prefix-cache", "vllm-disk-tier", "vllm-gpu-reference",
        "vllm-gpu-prefix-cache", "vllm-gpu-kv-offload", "vllm-gpu-lmcache"]


def render_builtin(name: str, **kw):
    profile = load_profile(name)
    if "attention_backend" in profile.accepts:
        kw.setdefault("attention_backend", "fa4")
    return render(profile, port=30000, log_dir=Path("/logs"), **kw)


# --- profiles ---------------------------------------------------------------------------------


def test_every_builtin_profile_is_listed():
    llamacpp = {"llamacpp-reference", "llamacpp-cached"}
    assert set(builtin_profile_names()) == (set(EXPECTED_SGLANG_ARGV) | llamacpp | set(VLLM)
                                            | set(EXPECTED_CPU_ARGV)
                                            | {f"embedded-{p}" for p in EMBEDDED}
                                            | {f"embedded-sglang-{p}" for p in EMBEDDED}
                                            | {"embedded-hicache-retract"})


def test_the_retract_profiles_force_retraction_as_sglang_and_the_engine_spell_it():
    sglang = render_builtin("sglang-hicache-seed-retract", model="M")
    assert sglang.env == {"SGLANG_TEST_RETRACT": "1", "SGLANG_TEST_RETRACT_INTERVAL": "7"}
    embedded = render_builtin("embedded-hicache-retract", model=None).argv
    assert embedded[3:5] == ["--profile", "hicache"]
    assert embedded[-4:] == ["--retract-interval", "7", "--jitter-seed", "0"]


@pytest.mark.parametrize("name", sorted(EXPECTED_CPU_ARGV))
def test_sglang_cpu_profile_renders_the_launcher_with_the_pinned_numerics(name):
    rendered = render_builtin(name, model="/models/M")
    assert rendered.argv == EXPECTED_CPU_ARGV[name]
    assert rendered.cwd == str(paths.REPO)  # python -m replay.sglang_cpu from the checkout
    assert rendered.env == {"SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("name", sorted(EXPECTED_SGLANG_ARGV))
def test_sglang_profile_renders_exactly_the_expected_argv(name):
    rendered = render_builtin(name, model="/models/M")
    assert rendered.argv == EXPECTED_SGLANG_ARGV[name]
    assert rendered.cwd is None


def test_file_storage_profile_points_the_backend_at_the_launch_scratch_dir():
    rendered = render_builtin("sglang-hicache-file-storage", model="M", scratch_dir=Path("/s/x"))
    assert rendered.env == {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/s/x"}


@pytest.mark.parametrize("name", sorted(EXPECTED_SGLANG_ARGV))
def test_sglang_profile_refuses_to_start_without_a_model(name):
    with pytest.raises(UsageError, match="needs a model: pass --model"):
        render_builtin(name, model=None)


@pytest.mark.parametrize("engine_profile", EMBEDDED)
def test_embedded_profiles_run_the_engine_with_optional_model_and_fault(engine_profile):
    name = f"embedded-{engine_profile}"
    base = [PY, "-m", "replay.engine", "--profile", engine_profile, "--host", "127.0.0.1",
            "--port", "30000"]
    assert render_builtin(name, model=None).argv == base
    assert render_builtin(name, model="tiny", fault="stale-host-page").argv == base + [
        "--model", "tiny", "--fault", "stale-host-page"]
    assert Path(render_builtin(name, model=None).cwd, "replay", "engine").is_dir()


@pytest.mark.parametrize("engine_profile", EMBEDDED)
def test_embedded_sglang_profiles_run_the_sglang_front_end_with_the_same_engine_profile(engine_profile):
    base = [PY, "-m", "replay.sglang_frontend", "--profile", engine_profile, "--host", "127.0.0.1",
            "--port", "30000"]
    name = f"embedded-sglang-{engine_profile}"
    assert render_builtin(name, model=None).argv == base
    assert render_builtin(name, model="tiny", fault="host-bf16").argv == base + [
        "--model", "tiny", "--fault", "host-bf16"]


def test_a_fault_is_refused_by_a_profile_that_cannot_inject_it():
    with pytest.raises(UsageError, match="takes no fault"):
        render_builtin("sglang-reference", model="M", fault="host-bf16")


@pytest.mark.parametrize("name", sorted(set(EXPECTED_SGLANG_ARGV) - set(NPU)))
def test_cuda_profiles_pin_the_attention_backend_they_are_given(name):
    argv = render_builtin(name, model="M", attention_backend="triton").argv
    assert argv[argv.index("--attention-backend") + 1] == "triton"


@pytest.mark.parametrize("name", NPU + ["embedded-hicache", "llamacpp-reference"])
def test_profiles_without_an_attention_backend_refuse_one(name):
    with pytest.raises(UsageError, match="takes no --attention-backend"):
        render(load_profile(name), model="M", port=1, log_dir=Path("/l"), attention_backend="fa3")


@pytest.mark.parametrize("name", NPU)
def test_npu_profiles_leave_attention_io_and_layout_to_device_npu(name):
    argv = render_builtin(name, model="M").argv
    assert "--device" in argv and "npu" in argv
    for forced in ("--attention-backend", "--hicache-io-backend", "--hicache-mem-layout"):
        assert forced not in argv


def test_the_reference_gets_the_replay_profiles_page_and_chunk_size():
    def value(argv, flag):
        return argv[argv.index(flag) + 1]
    reference = render_builtin("sglang-reference", model="M").argv
    for name in set(EXPECTED_SGLANG_ARGV) - set(NPU) - {"sglang-reference"}:
        replay = render_builtin(name, model="M").argv
        for flag in ("--attention-backend", "--page-size", "--chunked-prefill-size"):
            assert value(replay, flag) == value(reference, flag), (name, flag)


def test_the_launcher_announces_the_default_backend_for_the_gpu_it_sees(monkeypatch):
    said = []
    monkeypatch.setattr("replay.server.gpu.visible_gpu", lambda: ((9, 0), "nvidia-smi"))
    assert attention_choice(load_profile("sglang-reference"), None, said.append) == "fa3"
    assert said == ["launch profile sglang-reference: attention backend fa3 "
                    "(default for sm90, seen by nvidia-smi)"]


def test_extra_args_are_appended_last_so_they_override():
    argv = render_builtin("sglang-hicache-seed", model="M", extra_args=["--max-total-tokens=8192"]).argv
    assert argv[-1] == "--max-total-tokens=8192"


def test_user_profile_from_a_toml_file(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('description = "d"\ncommand = ["{python}", "-m", "x", "--port", "{port}", '
                    '"--model", "{model}"]\n[env]\nA = "{log_dir}/a"\n')
    profile = load_profile(str(path))
    assert profile.name == "mine" and profile.required == ["model"] and profile.source == str(path)
    rendered = render(profile, model="m", port=5, log_dir=Path("/l"))
    assert rendered.argv == [PY, "-m", "x", "--port", "5", "--model", "m"]
    assert rendered.env == {"A": "/l/a"}


@pytest.mark.parametrize("text, message", [
    ('command = ["x", "{nope}"]', "unknown placeholder"),
    ('command = []', "non-empty list"),
    ('command = ["x"]\nbogus = 1', "unknown key"),
    ('command = ["x"]\nstartup_timeout = -1', "positive number"),
    ('command = ["x"]\n[optional_args]\nport = ["--p", "{port}"]', "optional_args keys"),
    ('command = ["x" ', "not valid TOML"),
    ('command = ["x{"]', "bad placeholder syntax"),
    ('command = ["x"]\nwarmup_input_ids = []', "token ids"),
])
def test_bad_profiles_are_usage_errors(text, message):
    with pytest.raises(UsageError, match=message):
        parse_profile(text, default_name="bad", source="bad.toml")


def test_unknown_profile_name_lists_the_builtins():
    with pytest.raises(UsageError, match="sglang-hicache-seed"):
        load_profile("no-such-profile")


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


def test_a_profile_names_the_api_whose_adapter_builds_its_warm_up():
    p = parse_profile('command = ["x"]\napi = "llamacpp"\n', default_name="p", source="p.toml")
    assert p.api == "llamacpp" and load_profile("llamacpp-cached").api == "llamacpp"
    assert load_profile("embedded-hicache").api == "sglang"


def test_a_profile_with_an_unknown_api_is_refused():
    with pytest.raises(UsageError, match="unknown --api 'grpc'"):
        parse_profile('command = ["x"]\napi = "grpc"\n', default_name="p", source="p.toml")


def test_the_warm_up_carries_the_api_key_for_a_server_started_with_one():
    import http.server
    import threading

    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append(self.headers.get("Authorization"))
            ok = self.headers.get("Authorization") == "Bearer k3y"
            self.send_response(200 if ok else 401)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_port}"
    try:
        assert http_status("POST", url + "/generate", body={}, timeout=5) == 401
        assert http_status("POST", url + "/generate", body={}, timeout=5, api_key="k3y") == 200
    finally:
        httpd.shutdown()
    assert seen == [None, "Bearer k3y"]


def test_a_stranger_holding_the_launch_port_is_refused_not_replayed_against(tmp_path,
                                                                            monkeypatch):
    """The port race: another server takes the chosen port before the launched one binds it
    (here the launched one never binds); the stranger answers health and warm-up, and must not
    be taken for the launched server."""
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
        profile_path = tmp_path / "sleeper.toml"
        profile_path.write_text(f'command = ["{PY}", "-c", "import time; time.sleep(60)"]\n'
                                "startup_timeout = 20\nstop_timeout = 5\n")
        monkeypatch.setattr(launch, "free_port", lambda host=launch.LOOPBACK: port)
        with pytest.raises(ServerError, match="did not launch"):
            with launched(load_profile(str(profile_path)), model=None,
                          log_path=tmp_path / "sleeper.log"):
                pytest.fail("yielded the stranger's URL")
    finally:
        stranger.kill()
        stranger.wait()


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


def test_a_line_the_server_repeats_is_shown_once_with_its_count(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("loading weights: this will take forever\n"
                   + 'fake: "GET /health HTTP/1.1" 503 -\n' * 40)
    assert log_tail(log) == ["loading weights: this will take forever",
                             'fake: "GET /health HTTP/1.1" 503 - (x40)']


# --- vLLM profiles ----------------------------------------------------------------------------


def _vllm_flags(name: str) -> list[str]:
    argv = render_builtin(name, model="/m").argv
    assert argv[:2] == ["sh", "-c"] and "-m vllm.entrypoints.openai.api_server" in argv[2]
    return argv[4:]


@pytest.mark.parametrize("name", VLLM)
def test_vllm_profiles_speak_the_vllm_api_in_dev_mode(name):
    profile = load_profile(name)
    assert profile.api == "vllm" and profile.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert ("NOT RUN HERE" in profile.description) == ("-gpu-" in name)


@pytest.mark.parametrize("reference, replay", [("vllm-reference", "vllm-prefix-cache"),
                                               ("vllm-gpu-reference", "vllm-gpu-prefix-cache")])
def test_a_vllm_reference_differs_from_its_replay_profile_only_in_caching(reference, replay):
    ref, rep = _vllm_flags(reference), _vllm_flags(replay)
    assert ref[-1] == "--no-enable-prefix-caching" and rep[-1] == "--enable-prefix-caching"
    assert ref[:-1] == rep[:-1]
    assert ref[ref.index("--max-num-batched-tokens") + 1] == "16384"  # whole-prompt prefill


def test_the_vllm_disk_tier_writes_into_the_launch_scratch_dir():
    argv = render_builtin("vllm-disk-tier", model="/m", scratch_dir=Path("/s/x")).argv
    config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert config["kv_connector"] == "ExampleConnector"
    assert config["kv_connector_extra_config"]["shared_storage_path"] == "/s/x/kv"
