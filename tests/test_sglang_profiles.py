"""Every built-in SGLang profile, checked by SGLang's own code: its argv parsed by
`prepare_server_args` and its flags resolved (`ServerArgs.resolve_once`) as on a B200 (sm100) and
an H200 (sm90), with the device capability faked through SGLang's own `override_platform`.

Needs sglang 0.5.23 importable (scripts/install_sglang.sh); skipped otherwise.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from replay.launch import load_profile, render

server_args = pytest.importorskip(
    "sglang.srt.server_args", reason="sglang 0.5.23 is not installed (scripts/install_sglang.sh)")
runtime_context = pytest.importorskip("sglang.srt.runtime_context")

HICACHE_PROFILES = ["sglang-hicache-seed", "sglang-hicache-write-back", "sglang-hicache-kernel-io",
                    "sglang-hicache-layer-first", "sglang-hicache-file-storage"]
NOT_A_GPU = dict(is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False,
                 is_mps=False, is_sm110=False, is_sm120=False, has_amx=False)
PLATFORMS = {
    "sm100": dict(NOT_A_GPU, is_sm90=False, is_sm100=True, is_sm100_or_sm110=True,
                  is_blackwell=True, is_hopper_with_cuda_12_3=False, has_flashinfer=False,
                  device_capability=(10, 0), device_sm=100),
    "sm90": dict(NOT_A_GPU, is_sm90=True, is_sm100=False, is_sm100_or_sm110=False,
                 is_blackwell=False, is_hopper_with_cuda_12_3=True, has_flashinfer=False,
                 device_capability=(9, 0), device_sm=90),
}
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


def launch_argv(name: str, model: str) -> list[str]:
    """What the launcher would run on a B200, without `python -m sglang.launch_server`."""
    kwargs = {}
    if "attention_backend" in inspect.signature(render).parameters:
        kwargs["attention_backend"] = "fa4"
    argv = render(load_profile(name), model=model, port=30000, log_dir=Path("/logs"), **kwargs).argv
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    return argv[3:]


def resolved(argv: list[str], gpu: str) -> dict:
    """SGLang's own resolution of a launch argv on a faked GPU. `--device cuda` is what SGLang
    detects by itself on a CUDA machine; this CPU has no CUDA to detect."""
    args = server_args.prepare_server_args([*argv, "--device", "cuda"])
    with runtime_context.override_platform(**PLATFORMS[gpu]):
        args.resolve_once()
    return args.resolved_dict()


@pytest.mark.parametrize("name", HICACHE_PROFILES)
def test_hicache_profile_starts_on_a_b200_with_its_radix_cache_on(name, tiny_model):
    args = resolved(launch_argv(name, tiny_model), "sm100")
    assert args["enable_hierarchical_cache"] is True
    assert args["disable_radix_cache"] is False
