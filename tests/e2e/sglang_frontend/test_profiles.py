"""Every built-in SGLang profile, checked by SGLang's own code: its argv parsed by
`prepare_server_args` and its flags resolved (`ServerArgs.resolve_once`) as on a B200 (sm100) and
an H200 (sm90), with the device capability faked through SGLang's own `override_platform`.

Needs sglang 0.5.23 importable (scripts/install_sglang.sh); skipped otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay.server.gpu import default_backend
from replay.server.profile import load_profile, render
from replay.judge.numerics import NUMERICS_FIELDS, compare_numerics

server_args = pytest.importorskip(
    "sglang.srt.server_args", reason="sglang 0.5.23 is not installed (scripts/install_sglang.sh)")
runtime_context = pytest.importorskip("sglang.srt.runtime_context")

CAPABILITY = {"sm100": (10, 0), "sm90": (9, 0)}
HICACHE_PROFILES = ["sglang-hicache-seed", "sglang-hicache-write-back", "sglang-hicache-kernel-io",
                    "sglang-hicache-layer-first", "sglang-hicache-file-storage"]
# SGLang's platform facts (runtime_context._PLATFORM_PROBES), all false unless a machine says so.
NO_FACTS = dict(is_cuda=False, is_hip=False, is_npu=False, is_xpu=False, is_musa=False,
                is_mps=False, is_sm90=False, is_sm100=False, is_sm100_or_sm110=False,
                is_sm110=False, is_sm120=False, is_blackwell=False,
                is_hopper_with_cuda_12_3=False, has_flashinfer=False, has_amx=False)
PLATFORMS = {
    "sm100": dict(NO_FACTS, is_cuda=True, is_sm100=True, is_sm100_or_sm110=True,
                  is_blackwell=True, device_capability=(10, 0), device_sm=100),
    "sm90": dict(NO_FACTS, is_cuda=True, is_sm90=True, is_hopper_with_cuda_12_3=True,
                 device_capability=(9, 0), device_sm=90),
}
NPU = dict(NO_FACTS, is_npu=True)
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "head_dim": 64,
}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A model directory SGLang's resolution can read: an HF config.json, no weights."""
    path = tmp_path_factory.mktemp("model")
    (path / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    return str(path)


def launch_argv(name: str, model: str, gpu: str = "sm100") -> list[str]:
    """What the launcher runs on that GPU (its default backend), without `python -m
    sglang.launch_server`."""
    profile = load_profile(name)
    backend = default_backend(CAPABILITY[gpu]) if "attention_backend" in profile.accepts else None
    argv = render(profile, model=model, port=30000, log_dir=Path("/logs"),
                  attention_backend=backend).argv
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    return argv[3:]


def resolved(argv: list[str], gpu: str) -> dict:
    """SGLang's own resolution of a launch argv on a faked GPU. `--device cuda` is what SGLang
    detects by itself on a CUDA machine; this CPU has no CUDA to detect."""
    args = server_args.prepare_server_args([*argv, "--device", "cuda"])
    with runtime_context.override_platform(**PLATFORMS[gpu]):
        args.resolve_once()
    return args.resolved_dict()


@pytest.mark.parametrize("gpu", ["sm100", "sm90"])
@pytest.mark.parametrize("name", HICACHE_PROFILES)
def test_hicache_profile_resolves_with_its_radix_cache_on(name, gpu, tiny_model):
    """The B200 failure: without a pinned backend SGLang picks flashinfer on sm100, turns the
    radix cache off for deterministic inference, and refuses HiCache with a ValueError."""
    args = resolved(launch_argv(name, tiny_model, gpu), gpu)
    assert args["enable_hierarchical_cache"] is True
    assert args["disable_radix_cache"] is False
    assert args["attention_backend"] == default_backend(CAPABILITY[gpu])


@pytest.mark.parametrize("gpu", ["sm100", "sm90"])
def test_reference_and_every_replay_profile_resolve_the_same_numerics(gpu, tiny_model):
    reference = resolved(launch_argv("sglang-reference", tiny_model, gpu), gpu)
    assert reference["disable_radix_cache"] is True
    for name in HICACHE_PROFILES:
        replay = resolved(launch_argv(name, tiny_model, gpu), gpu)
        assert compare_numerics(reference, replay).differing == (), name


def test_today_the_reference_would_resolve_page_size_one(tiny_model):
    """Why the reference pins --page-size: left alone, radix-off SGLang resolves 1, not 128."""
    argv = launch_argv("sglang-reference", tiny_model, "sm90")
    i = argv.index("--page-size")
    assert resolved(argv[:i] + argv[i + 2:], "sm90")["page_size"] == 1


def test_every_numerics_field_is_a_resolved_server_argument(tiny_model):
    args = resolved(launch_argv("sglang-reference", tiny_model), "sm100")
    assert [f for f in NUMERICS_FIELDS if f not in args] == []


@pytest.mark.parametrize("name", sorted(set(HICACHE_PROFILES) | {"sglang-reference",
                                                                  "sglang-npu-reference",
                                                                  "sglang-npu-hicache"}))
def test_every_sglang_profile_parses_with_sglangs_own_parser(name, tiny_model):
    args = server_args.prepare_server_args(launch_argv(name, tiny_model))
    assert args.model_path == tiny_model


def resolved_on_npu(name: str, model: str, monkeypatch) -> dict:
    """SGLang's resolution with `--device npu` on a faked Ascend machine. The NPU memory probe
    needs torch_npu, so it is the one SGLang function replaced here (64 GB, an Atlas A2)."""
    import sglang.srt.hardware_backend.npu.utils as npu_utils
    import sglang.srt.utils.common as common
    for module in (npu_utils, common):
        monkeypatch.setattr(module, "get_npu_memory_capacity", lambda: 64 * 1024)
    args = server_args.prepare_server_args(launch_argv(name, model))
    with runtime_context.override_platform(**NPU):
        args.resolve_once()
    return args.resolved_dict()


def test_device_npu_itself_forces_ascend_attention_kernel_ascend_io_and_page_first_direct(
        tiny_model, monkeypatch):
    args = resolved_on_npu("sglang-npu-hicache", tiny_model, monkeypatch)
    assert (args["attention_backend"], args["hicache_io_backend"], args["hicache_mem_layout"]) \
        == ("ascend", "kernel_ascend", "page_first_direct")
    assert args["disable_radix_cache"] is False


def test_npu_reference_and_hicache_resolve_the_same_numerics(tiny_model, monkeypatch):
    reference = resolved_on_npu("sglang-npu-reference", tiny_model, monkeypatch)
    replay = resolved_on_npu("sglang-npu-hicache", tiny_model, monkeypatch)
    assert compare_numerics(reference, replay).differing == ()


@pytest.mark.parametrize("gpu", ["sm100", "sm90"])
def test_the_control_keeps_the_radix_cache_on_without_hicache_or_a_pool_cap(gpu, tiny_model):
    args = resolved(launch_argv("sglang-radix", tiny_model, gpu), gpu)
    assert args["disable_radix_cache"] is False
    assert args["enable_hierarchical_cache"] is False
    assert args["max_total_tokens"] is None  # sized from memory: nothing evicted


@pytest.mark.parametrize("gpu", ["sm100", "sm90"])
def test_every_hicache_profile_names_a_control_with_the_same_numerics(gpu, tiny_model):
    for name in HICACHE_PROFILES:
        control = load_profile(name).control
        assert control == "sglang-radix", name
        ours = resolved(launch_argv(name, tiny_model, gpu), gpu)
        theirs = resolved(launch_argv(control, tiny_model, gpu), gpu)
        assert compare_numerics(ours, theirs).differing == (), name


@pytest.mark.parametrize("gpu", ["sm100", "sm90"])
def test_the_control_resolves_the_numerics_of_the_cache_off_reference(gpu, tiny_model):
    """So a cached reference recorded on it replays on the HiCache profiles (numerics parity)."""
    reference = resolved(launch_argv("sglang-reference", tiny_model, gpu), gpu)
    cached = resolved(launch_argv("sglang-radix", tiny_model, gpu), gpu)
    assert compare_numerics(reference, cached).differing == ()
