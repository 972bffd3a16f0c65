"""The engine's settings as SGLang server arguments, and back.

The front end passes every engine setting to SGLang as the real ServerArgs flag of the same name,
so `/server_info` is SGLang's own resolution of them (`--expect-cache auto` and the numerics-parity
checks read it unchanged), and the scheduler process rebuilds the engine's options from the
resolved ServerArgs: one source of truth. What has no ServerArgs field travels in the model
directory (engine config, weight seed) or the environment (the fault, the file storage directory,
under SGLang's own variable for it).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from replay.engine.options import EngineOptions

FAULT_ENV = "GOLDEN_ENGINE_FAULT"
# A running front end's fault: /set_internal_state {"server_args": {"engine_fault:<name>|none": 1}}
# (SGLang passes numeric knobs only, so the name rides in the key; scheduler_process.py answers it)
FAULT_KNOB = "engine_fault:"


def fault_knob(fault: str | None) -> dict[str, int]:
    """The `server_args` of a /set_internal_state that switches the engine to `fault` (None: none)."""
    return {f"{FAULT_KNOB}{fault or 'none'}": 1}


STORAGE_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"  # SGLang's file backend reads it too

# EngineOptions fields that are ServerArgs fields of the same name and meaning.
SHARED_FIELDS = (
    "page_size", "max_total_tokens", "chunked_prefill_size", "max_running_requests",
    "disable_radix_cache", "mamba_track_interval", "disable_overlap_schedule",
    "enable_hierarchical_cache", "hicache_ratio", "hicache_size", "hicache_write_policy",
    "hicache_io_backend", "hicache_mem_layout", "hicache_storage_backend",
)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def server_argv(options: EngineOptions, model_path: str) -> list[str]:
    """SGLang launch flags carrying `options` (host and port included)."""
    argv = ["--model-path", model_path, "--host", options.host, "--port", str(options.port),
            "--device", "cpu", "--enable-deterministic-inference",
            # the engine is exact on its own; triton is the deterministic backend SGLang accepts
            # on any hardware (the numerics-parity check compares it across servers)
            "--attention-backend", "triton"]
    for name in SHARED_FIELDS:
        value = getattr(options, name)
        if isinstance(value, bool):
            if value:
                argv.append(_flag(name))
        elif value is not None:
            if name == "hicache_size" and not value:
                continue  # 0: sized by hicache_ratio (SGLang's default too)
            argv += [_flag(name), str(value)]
    return argv


def server_env(options: EngineOptions) -> dict[str, str]:
    """Environment variables for what ServerArgs cannot carry."""
    env = {}
    if options.fault:
        env[FAULT_ENV] = options.fault
    if options.hicache_storage_dir:
        env[STORAGE_DIR_ENV] = options.hicache_storage_dir
    return env


def engine_options(server_args: Any, config: str, seed: int,
                   environ: dict[str, str] | None = None) -> EngineOptions:
    """The engine options a resolved ServerArgs (plus the model directory's entry) describes."""
    environ = os.environ if environ is None else environ
    values = {name: getattr(server_args, name) for name in SHARED_FIELDS}
    if values["hicache_size"] in (None, 0):
        values["hicache_size"] = 0.0
    if values["hicache_ratio"] is None:
        values["hicache_ratio"] = EngineOptions.hicache_ratio
    return replace(EngineOptions(), model=config, seed=seed, fault=environ.get(FAULT_ENV) or None,
                   hicache_storage_dir=environ.get(STORAGE_DIR_ENV) or None, **values)
