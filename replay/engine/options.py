"""Every engine setting in one frozen dataclass, and the named profiles the CLI starts.

The field names follow SGLang's server arguments, so `/server_info` reads like SGLang's and the
tool's cache expectations (page size, track interval, write policy) come from the same keys.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from replay.engine.faults import check_fault

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
MEM_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
IO_BACKENDS = ("direct", "kernel")
STORAGE_BACKENDS = (None, "file")


@dataclass(frozen=True)
class EngineOptions:
    model: str = "tiny"  # a name in replay.engine.config.CONFIGS
    seed: int = 0  # weight seed
    device: str = "cpu"
    fault: str | None = None  # a name in replay.engine.faults.FAULTS
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    # Device KV pool and prefix cache.
    page_size: int = 16
    max_total_tokens: int = 16384  # device pool capacity, in tokens (a multiple of page_size)
    chunked_prefill_size: int = 512  # prefill tokens per step, over all requests
    max_running_requests: int = 64
    disable_radix_cache: bool = False
    mamba_track_interval: int = 128  # SSM checkpoints every this many tokens
    disable_overlap_schedule: bool = False
    # Hierarchical cache (host tier, optional storage tier).
    enable_hierarchical_cache: bool = False
    hicache_ratio: float = 2.0  # host pool pages / device pool pages
    hicache_size: float = 0.0  # host pool in GB; overrides hicache_ratio when > 0
    hicache_write_policy: str = "write_through"
    hicache_io_backend: str = "direct"  # reported only: both copy the same way here
    hicache_mem_layout: str = "layer_first"
    hicache_storage_backend: str | None = None  # None or "file"
    hicache_storage_dir: str | None = None  # "file" backend directory; None: a private temp dir
    # Test pressure (off by default): retract one decoding request every N scheduler steps
    # (SGLang: SGLANG_TEST_RETRACT=1 with SGLANG_TEST_RETRACT_INTERVAL=N), and a seeded jitter
    # of admission timing and step order (replay/engine/scheduler.py). Neither changes a bit.
    test_retract_interval: int = 0
    schedule_jitter_seed: int | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.page_size < 1:
            problems.append("page_size must be >= 1")
        if self.max_total_tokens < self.page_size or self.max_total_tokens % self.page_size:
            problems.append("max_total_tokens must be a positive multiple of page_size")
        if self.chunked_prefill_size < 1:
            problems.append("chunked_prefill_size must be >= 1")
        if self.max_running_requests < 1:
            problems.append("max_running_requests must be >= 1")
        if self.mamba_track_interval < 1 or self.mamba_track_interval % self.page_size:
            problems.append("mamba_track_interval must be a positive multiple of page_size "
                            "(SSM checkpoints sit on page boundaries)")
        if self.test_retract_interval < 0:
            problems.append("test_retract_interval must be >= 0 (0: never retract)")
        if self.schedule_jitter_seed is not None and self.schedule_jitter_seed < 0:
            problems.append("schedule_jitter_seed must be >= 0")
        if self.hicache_ratio <= 0 or self.hicache_size < 0:
            problems.append("hicache_ratio must be > 0 and hicache_size >= 0")
        if self.hicache_write_policy not in WRITE_POLICIES:
            problems.append(f"hicache_write_policy must be one of {', '.join(WRITE_POLICIES)}")
        if self.hicache_mem_layout not in MEM_LAYOUTS:
            problems.append(f"hicache_mem_layout must be one of {', '.join(MEM_LAYOUTS)}")
        if self.hicache_io_backend not in IO_BACKENDS:
            problems.append(f"hicache_io_backend must be one of {', '.join(IO_BACKENDS)}")
        if self.hicache_storage_backend not in STORAGE_BACKENDS:
            problems.append("hicache_storage_backend must be 'file' or None")
        if self.enable_hierarchical_cache and self.disable_radix_cache:
            problems.append("the hierarchical cache needs the radix cache")
        if self.hicache_storage_backend and not self.enable_hierarchical_cache:
            problems.append("a storage backend needs the hierarchical cache")
        if problems:
            raise ValueError("invalid engine options: " + "; ".join(problems))
        check_fault(self.fault)

    @property
    def overlap(self) -> bool:
        return not self.disable_overlap_schedule

    def server_args(self) -> dict[str, Any]:
        """The settings as SGLang-style server arguments (for /server_info)."""
        args = asdict(self)
        args["model_path"] = args.pop("model")
        return args


# The hicache shape: pages of 64 tokens (two per 128-token track interval) and a device pool of
# 3072 tokens (48 pages). A 3x3 branching run (512-token prefixes, 64-token forks, 2 turns of +32,
# 160 new tokens) needs 12-18 pages per request, so the tree cannot stay on the device: turns 1
# and 2 load about half of their reused pages back from host (7,488 of 15,360 cached tokens;
# docs/benchmarks.md). At 2048 tokens only two requests fit at once and the replay takes 40% longer.
_HICACHE = EngineOptions(
    page_size=64,
    max_total_tokens=3072,
    chunked_prefill_size=512,
    mamba_track_interval=128,
    enable_hierarchical_cache=True,
    hicache_ratio=4.0,
    hicache_write_policy="write_through",
    hicache_mem_layout="page_first",
)

PROFILES: dict[str, EngineOptions] = {
    # What goldens are recorded with: no prefix cache, no overlap scheduling.
    "reference": EngineOptions(disable_radix_cache=True, disable_overlap_schedule=True),
    # Device radix cache only (SGLang's default serving shape).
    "radix": EngineOptions(page_size=64, max_total_tokens=8192),
    "hicache": _HICACHE,
    "hicache-write-back": replace(_HICACHE, hicache_write_policy="write_back"),
    "hicache-layer-first": replace(_HICACHE, hicache_mem_layout="layer_first"),
    # A device pool of 32 pages and a host pool of 32 (the tree needs ~105), so host-evicted
    # pages go on to storage and later hits come from device, host and storage.
    "hicache-storage": replace(_HICACHE, max_total_tokens=2048, hicache_ratio=1.0,
                               hicache_storage_backend="file"),
}


def profile_options(name: str, **overrides: Any) -> EngineOptions:
    """A profile with some fields replaced (None values are ignored: unset CLI flags)."""
    if name not in PROFILES:
        raise ValueError(f"unknown engine profile {name!r} (choose from {', '.join(PROFILES)})")
    known = {f.name for f in fields(EngineOptions)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown engine option(s): {', '.join(unknown)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(PROFILES[name], **given)


# Settings a command line may set on top of a profile, as `python -m replay.engine` and the SGLang
# front end (`python -m replay.sglang_frontend`) spell them: field -> (flag, help). `golden demo`
# and the detection matrix pass the same flags to the engines they launch.
OVERRIDE_FLAGS: dict[str, tuple[str, str]] = {
    "max_total_tokens": ("--max-total-tokens", "device KV pool in tokens (default: the profile's)"),
    "page_size": ("--page-size", "tokens per KV page (default: the profile's)"),
    "mamba_track_interval": ("--mamba-track-interval", "SSM checkpoints every this many tokens, "
                             "a multiple of the page size (default: the profile's)"),
    "test_retract_interval": ("--retract-interval", "retract one decoding request every N steps "
                              "(SGLang's SGLANG_TEST_RETRACT_INTERVAL; default 0: never)"),
    "schedule_jitter_seed": ("--jitter-seed", "seeded jitter of admission timing and step order "
                             "(default: none)"),
}


# What SGLang's ServerArgs carry to the front end's engine (replay/sglang_frontend/args.py):
# the front end takes these overrides only, so none is silently dropped.
SERVER_ARG_OVERRIDES = ("max_total_tokens", "page_size", "mamba_track_interval")


def add_override_flags(parser: argparse.ArgumentParser,
                       names: tuple[str, ...] = tuple(OVERRIDE_FLAGS)) -> None:
    for name in names:
        flag, help_text = OVERRIDE_FLAGS[name]
        parser.add_argument(flag, dest=name, type=int, metavar="N", help=help_text)


def overrides_given(args: argparse.Namespace) -> dict[str, Any]:
    """The OVERRIDE_FLAGS values of parsed arguments (None where not given: the profile's)."""
    return {name: getattr(args, name) for name in OVERRIDE_FLAGS if hasattr(args, name)}
