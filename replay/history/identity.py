"""Who served a run, as the history keys it: the server's flags key and its launch profile.

A request is `flaky` when it both passed and failed on one server version *and* flags key, so
the key must be the same for two launches of one configuration and differ when the arithmetic
or the cache differs. It is the sha256 of the canonical JSON of the settings that decide either:

- the numerics fields (replay/judge/numerics.py `NUMERICS_FIELDS`: kernels, precision,
  parallelism, page size, chunking, determinism, sampling), and
- the cache settings (`CACHE_FIELDS`: whether and where prefixes are cached, how big the pools
  are, how states are checkpointed, written and evicted, the scheduling that decides what is
  cached when; and the embedded engine's injected fault and test pressures).

Nothing else a server reports goes in: not its host or port (a launch picks a random port), pids,
the launch command, random seeds (greedy decoding needs none), paths (log, scratch and storage
directories are temporary), times or internal state. The server's version is its own column,
and the model is fixed per golden (a replay on another model is refused). The launch profile
(`launch:NAME`) is recorded beside the key, so a page can tell the runs of a matrix apart.
"""

from __future__ import annotations

from typing import Any

from replay.judge.numerics import NUMERICS_FIELDS

CACHE_FIELDS: tuple[str, ...] = (
    "disable_radix_cache", "disable_overlap_schedule", "disable_chunked_prefix_cache",
    "max_total_tokens", "mem_fraction_static", "max_running_requests", "max_prefill_tokens",
    "mamba_track_interval", "mamba_scheduler_strategy", "mamba_full_memory_ratio",
    "enable_hierarchical_cache", "hicache_ratio", "hicache_size", "hicache_write_policy",
    "hicache_io_backend", "hicache_mem_layout", "hicache_storage_backend",
    "hicache_storage_prefetch_policy", "radix_eviction_policy", "schedule_policy",
    "enable_mixed_chunk",
    # the embedded engine (replay/engine/options.py): the fault it injects, its test pressures
    "fault", "test_retract_interval", "schedule_jitter_seed",
)
IDENTITY_FIELDS: tuple[str, ...] = tuple(dict.fromkeys(NUMERICS_FIELDS + CACHE_FIELDS))
LAUNCH_PREFIX = "launch:"


def server_flags(server_info: dict[str, Any]) -> dict[str, Any]:
    """The settings of `server_info` that identify a server configuration (sorted by name)."""
    return {k: server_info[k] for k in sorted(IDENTITY_FIELDS) if k in server_info}


def launch_profile(server_target: Any) -> str | None:
    """The launch profile a report names (`server_target` "launch:NAME fault=..."), or None for a
    server given by URL."""
    if not isinstance(server_target, str) or not server_target.startswith(LAUNCH_PREFIX):
        return None
    name = server_target[len(LAUNCH_PREFIX):].split(" ", 1)[0]
    return name or None
