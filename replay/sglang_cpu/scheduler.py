"""The scheduler process of a CPU test server: SGLang's own `run_scheduler_process`, unmodified,
after the CPU patches are applied in this (spawned) process, where the host pools are built."""

from __future__ import annotations

from typing import Any


def run_scheduler_process(*args: Any, **kwargs: Any) -> None:
    from sglang.srt.managers.scheduler import run_scheduler_process as sglang_scheduler

    from replay.sglang_cpu import disaggregation, hybrid, patches

    server_args = args[0] if args else kwargs["server_args"]
    patches.apply()
    hybrid.apply(server_args.model_path)  # Gated DeltaNet hybrids only
    disaggregation.apply(server_args)  # PD servers only
    sglang_scheduler(*args, **kwargs)
