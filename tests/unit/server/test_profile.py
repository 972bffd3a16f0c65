"""Launch profiles: parsing, rendering, and the built-ins' exact argv (replay/server/profile.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from replay.utils.errors import UsageError
from replay.server.profile import (
    attention_choice, builtin_profile_names, load_profile, parse_profile, render,
)
from tests.support import paths

PY = sys.executable
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
    "sglang-radix": SG + PINNED + [
        "--mamba-track-interval", "128", "--mem-fraction-static", "0.85",
        "--max-running-requests", "4", "--max-mamba-cache-size", "500",
        "--enable-deterministic-inference"],
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
# The hybrid (Qwen3-Next) on the CPU server: page 1 and overlap off everywhere (SGLang's
# no_buffer Mamba cache, the only one a CPU has, requires both), a tight Mamba pool for HiCache.
HYBRID_PIN = CPU_PIN[:CPU_PIN.index("--page-size")] + [
    "--page-size", "1", "--chunked-prefill-size", "2048", "--disable-overlap-schedule"]
NO_BUFFER = ["--mamba-radix-cache-strategy", "no_buffer"]
EXPECTED_CPU_ARGV |= {
    "sglang-cpu-hybrid-reference": HYBRID_PIN + [
        "--max-total-tokens", "16384", "--max-mamba-cache-size", "64", "--disable-radix-cache"],
    "sglang-cpu-hybrid-radix": HYBRID_PIN + [
        "--max-total-tokens", "4096", "--max-mamba-cache-size", "16", *NO_BUFFER],
    "sglang-cpu-hybrid-hicache": HYBRID_PIN + [
        "--max-total-tokens", "4096", "--max-mamba-cache-size", "4", *NO_BUFFER,
        "--enable-hierarchical-cache", "--hicache-ratio", "4",
        "--hicache-write-policy", "write_through", "--hicache-io-backend", "direct"],
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


# The sglang-cpu-hicache variants of issue 32 (L3 backends, policies, layouts, retraction): each
# is resolved by SGLang's own parser, with its backend, policy and layout checked, in
# tests/e2e/sglang_cpu/test_profiles.py (CPU_PROFILES there).
CPU_VARIANTS = {f"sglang-cpu-hicache-{v}" for v in (
    "file", "mooncake", "hf3fs", "nixl", "seaweedfs", "sim", "shm", "write-back",
    "write-through-selective", "layer-first", "retract")}


def test_every_builtin_profile_is_listed():
    llamacpp = {"llamacpp-reference", "llamacpp-cached"}
    assert set(builtin_profile_names()) == (set(EXPECTED_SGLANG_ARGV) | llamacpp | set(VLLM)
                                            | set(EXPECTED_CPU_ARGV)
                                            | {f"embedded-{p}" for p in EMBEDDED}
                                            | {f"embedded-sglang-{p}" for p in EMBEDDED}
                                            | {"embedded-hicache-retract"} | CPU_VARIANTS)


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


def test_a_launch_env_is_set_as_given_over_the_profiles_env():
    rendered = render_builtin("sglang-hicache-file-storage", model="M", scratch_dir=Path("/s/x"),
                              extra_env={"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/shared/{x}",
                                         "NCCL_NVLS_ENABLE": "0"})
    assert rendered.env == {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/shared/{x}",
                            "NCCL_NVLS_ENABLE": "0"}


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


def test_a_profile_names_the_api_whose_adapter_builds_its_warm_up():
    p = parse_profile('command = ["x"]\napi = "llamacpp"\n', default_name="p", source="p.toml")
    assert p.api == "llamacpp" and load_profile("llamacpp-cached").api == "llamacpp"
    assert load_profile("embedded-hicache").api == "sglang"


def test_a_profile_with_an_unknown_api_is_refused():
    with pytest.raises(UsageError, match="unknown --api 'grpc'"):
        parse_profile('command = ["x"]\napi = "grpc"\n', default_name="p", source="p.toml")


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
