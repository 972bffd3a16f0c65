"""The sglang-cpu-* launch profiles, checked by SGLang 0.5.23's own code: each argv (after `python
-m replay.sglang_cpu`) parsed by `prepare_server_args` and resolved (`resolve_once`) on a machine
with no accelerator, and the resolved numerics compared as `golden replay` compares them.

Needs sglang 0.5.23 importable (scripts/install_sglang.sh; scripts/test.sh runs the suite on that
venv's Python); skipped otherwise. Starts no server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay.judge.numerics import compare_numerics
from replay.server.profile import load_profile, render
from replay.sglang_cpu.l3_services import split_service

server_args = pytest.importorskip(
    "sglang.srt.server_args", reason="sglang 0.5.23 is not installed (scripts/install_sglang.sh)")
runtime_context = pytest.importorskip("sglang.srt.runtime_context")

# SGLang's platform facts (runtime_context._PLATFORM_PROBES), all false: a CPU without AMX.
NO_FACTS = dict(is_cuda=False, is_hip=False, is_npu=False, is_xpu=False, is_musa=False,
                is_mps=False, is_sm90=False, is_sm100=False, is_sm100_or_sm110=False,
                is_sm110=False, is_sm120=False, is_blackwell=False,
                is_hopper_with_cuda_12_3=False, has_flashinfer=False, has_amx=False)
L3_BACKENDS = ("file", "mooncake", "hf3fs", "nixl", "seaweedfs", "sim")
REPLAYS = ("sglang-cpu-radix", "sglang-cpu-hicache", "sglang-cpu-hicache-write-back",
           "sglang-cpu-hicache-write-through-selective", "sglang-cpu-hicache-layer-first",
           "sglang-cpu-hicache-retract", *(f"sglang-cpu-hicache-{b}" for b in L3_BACKENDS))


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    """A config-only model directory (resolution reads config.json, never the weights)."""
    from replay.sglang_cpu.tiny_model import llama_config

    path = tmp_path_factory.mktemp("model")
    (path / "config.json").write_text(json.dumps(llama_config(0, "bfloat16")))
    return str(path)


def resolved(name: str, model: str) -> dict:
    argv = render(load_profile(name), model=model, port=30000, log_dir=Path("/logs")).argv
    assert argv[1:3] == ["-m", "replay.sglang_cpu"]
    _, sglang_argv = split_service(argv[3:])  # the launcher's own flag, never SGLang's
    args = server_args.prepare_server_args(sglang_argv)
    with runtime_context.override_platform(**NO_FACTS):
        args.resolve_once()
    return args.resolved_dict()


def test_the_reference_resolves_with_its_radix_cache_off(model):
    args = resolved("sglang-cpu-reference", model)
    assert args["disable_radix_cache"] is True and args["device"] == "cpu"


@pytest.mark.parametrize("name", REPLAYS)
def test_every_cpu_replay_profile_resolves_the_reference_numerics(name, model):
    replay = resolved(name, model)
    assert replay["disable_radix_cache"] is False
    assert compare_numerics(resolved("sglang-cpu-reference", model), replay).differing == ()


def test_the_hicache_profile_resolves_to_direct_io_into_page_first_direct(model):
    args = resolved("sglang-cpu-hicache", model)
    assert (args["enable_hierarchical_cache"], args["hicache_io_backend"],
            args["hicache_mem_layout"], args["hicache_write_policy"]) == \
        (True, "direct", "page_first_direct", "write_through")


@pytest.mark.parametrize("backend", L3_BACKENDS)
def test_every_l3_profile_resolves_to_its_backend_with_a_host_pool_no_larger_than_the_device(
        backend, model):
    args = resolved(f"sglang-cpu-hicache-{backend}", model)
    assert (args["hicache_storage_backend"], args["hicache_ratio"],
            args["hicache_storage_prefetch_policy"]) == (backend, 1.0, "wait_complete")


@pytest.mark.parametrize("name,policy,layout", [
    ("sglang-cpu-hicache-write-back", "write_back", "page_first_direct"),
    ("sglang-cpu-hicache-write-through-selective", "write_through_selective", "page_first_direct"),
    ("sglang-cpu-hicache-layer-first", "write_through", "layer_first"),
])
def test_every_policy_and_layout_profile_resolves_as_named(name, policy, layout, model):
    args = resolved(name, model)
    assert (args["hicache_write_policy"], args["hicache_mem_layout"],
            args["hicache_io_backend"]) == (policy, layout, "direct")


@pytest.fixture(scope="module")
def hybrid_model(tmp_path_factory) -> str:
    from replay.sglang_cpu.tiny_model import qwen3_next_config

    path = tmp_path_factory.mktemp("hybrid")
    (path / "config.json").write_text(json.dumps(qwen3_next_config(0)))
    return str(path)


@pytest.mark.parametrize("name", ("sglang-cpu-hybrid-radix", "sglang-cpu-hybrid-hicache"))
def test_every_hybrid_replay_profile_resolves_the_hybrid_references_numerics(name, hybrid_model):
    replay = resolved(name, hybrid_model)
    assert (replay["disable_radix_cache"], replay["mamba_radix_cache_strategy"]) == \
        (False, "no_buffer")
    reference = resolved("sglang-cpu-hybrid-reference", hybrid_model)
    assert compare_numerics(reference, replay).differing == ()
