"""Checks shared by the commands that take the same options: one place, one message each."""

from __future__ import annotations

from replay.client import ClientOptions
from replay.diff import Policy
from replay.errors import UsageError
from replay.replayer import ReplayOptions
from replay.runner import check_schedule


def client_options(concurrency: int, timeout: float, api_key: str | None) -> ClientOptions:
    if concurrency < 1:
        raise UsageError("--concurrency must be >= 1")
    if timeout <= 0:
        raise UsageError("--timeout must be > 0")
    return ClientOptions(concurrency=concurrency, request_timeout=timeout, api_key=api_key)


def replay_options(policy: str, schedule: str, repeat: int, require_tier: str | None,
                   expect_cache: str, allow_model_mismatch: bool,
                   allow_numerics_mismatch: bool = False) -> ReplayOptions:
    """`--policy`, `--schedule`, `--repeat`, `--require-tier`... checked and combined."""
    parsed = Policy.parse(policy)
    check_schedule(schedule)
    if repeat < 1:
        raise UsageError("--repeat must be >= 1")
    if require_tier not in (None, "host", "storage", "device"):
        raise UsageError(f"invalid --require-tier {require_tier!r}: use host or storage")
    return ReplayOptions(policy=parsed, schedule=schedule, repeat=repeat, expect_cache=expect_cache,
                         require_tier=require_tier, allow_model_mismatch=allow_model_mismatch,
                         allow_numerics_mismatch=allow_numerics_mismatch)
