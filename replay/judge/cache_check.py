"""Cache-hit expectations: a replay in which nothing was served from cache proves nothing.

For a turn >= 1 request, let `history` be its parent's input length and `output` its parent's
output length; its input starts with those `history + output` tokens (sglang-protocol.md):
- `attention` (radix cache over pages of size P): cached_tokens is one of `history + output`,
  `history + output - 1`, or `floor((history + output - 1) / P) * P`;
- `mamba:I` (hybrid model, SSM states tracked every I tokens):
  cached_tokens >= floor((history + output - 1) / I) * I;
- `any`: cached_tokens >= 1 (some prefix was reused), for caches that are not page-based and
  whose hit length depends on slot assignment (llama.cpp);
- `none`: no expectation (e.g. replaying against another cache-disabled server).
`auto` reads the server's settings; an API adapter that knows its server's cache better names
the rule itself (its `expect_cache_auto` trait: `none` or `any`), passed in as `api_default`.
A request asking for prompt logprobs from position S (`cap`) may reuse at most S tokens (SGLang
caps reuse there), so its span is cut to S + 1 before the rules above.
A request of a salted group (a cache key of its own) must reuse nothing (`isolation_problem`).
Always: cached_tokens <= prompt length - 1 (the last prompt token is always computed), which is
how an over-reported hit is caught.

Eviction pressure (`attention` only; docs/report.md, `expect_cache`): when the tokens a golden
puts through the cache outgrow the server's device pool (SGLang's `max_total_num_tokens`), the
radix cache must evict, whole pages at a time, least recently used leaves first; a parent's last
pages are such leaves. Then a hit shorter than expected by whole pages is an eviction, not a cache bug, and
is accepted; a hit that is not a whole number of pages, or longer than the parent's tokens, stays
a fail. Without pressure (or without a reported pool size) every shortfall fails as before.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from replay.utils.errors import MalformedResponse, UsageError

# Fallback only, for servers older than 0.5.23 (which report `uses_mamba_radix_cache`): substrings
# of the lowercased model_type, architectures and model path of hybrid (Mamba / linear-attention)
# models, from SGLang 0.5.23's hybrid architectures (arg_groups/overrides.py, configs/).
HYBRID_MARKERS = (
    "mamba", "hybrid", "nemotron_h", "nemotronh", "qwen3_next", "qwen3next", "falcon_h1",
    "falconh1", "jamba", "granitemoehybrid", "lfm2", "zamba", "zaya", "bamba",
    "inkling",  # the seed's model: model_type inkling_model, InklingForConditionalGeneration
    "kimi_linear", "kimilinear", "kimi_k3", "kimik3", "bailing_hybrid", "bailingmoev2_5",
    "bailingmoev3", "bailing_moe_v3", "qwen3_5", "qwen3.5", "qwen4exp", "qwen4_exp",
    "interns2", "intern_s2", "minicpmv4_6", "minicpmv4_7", "jetnemotron", "jet_nemotron",
    "jetvlm", "jet_vlm", "glm5next", "glm5_next", "gigachat3_5", "gigachat35",
)
# Mamba radix cache strategies that keep SSM states at track boundaries (every
# `mamba_track_interval` tokens); `no_buffer` keeps one only where a request finished.
TRACKING_STRATEGIES = ("extra_buffer", "extra_buffer_lazy", "auto")


@dataclass(frozen=True)
class CacheExpectation:
    kind: str  # "none" | "any" | "attention" | "mamba"
    page_size: int = 1
    interval: int = 1
    pressure: bool = False  # the golden outgrows the device pool: whole-page shortfalls allowed

    def __str__(self) -> str:
        if self.kind == "mamba":
            return f"mamba:{self.interval}"
        if self.kind == "attention":
            pressure = ", pool pressure" if self.pressure else ""
            return f"attention(page={self.page_size}{pressure})"
        return "any" if self.kind == "any" else "none"

    def minimum(self, history: int, output: int, lag: int = 0, cap: int | None = None) -> int:
        """The least acceptable hit; `lag` is SGLang's allowed checkpoint lag for a request whose
        parent was retracted (its last decode checkpoint may be gone): mamba only. `cap`: the
        request's logprob_start_len, past which nothing may be reused."""
        span = _span(history, output, cap)
        if self.kind == "attention":
            return min(span - 1, (span - 1) // self.page_size * self.page_size)
        if self.kind == "mamba":
            return max(0, (span - 1) // self.interval * self.interval - lag)
        if self.kind == "any":
            return 1
        return 0

    def problem(self, *, turn: int, history: int, output: int, cached: int, prompt: int,
                lag: int = 0, cap: int | None = None) -> str | None:
        """Why this hit breaks the expectation, or None (`lag`, `cap`: see `minimum`)."""
        if cached > prompt - 1:
            return f"cached_tokens {cached} >= prompt length {prompt}: over-reported"
        if cap is not None and cached > cap:
            return (f"cached_tokens {cached} > logprob_start_len {cap}: reused positions whose "
                    "prompt logprobs were asked")
        if self.kind == "none" or turn == 0:
            return None
        if self.kind == "any":
            return None if cached >= 1 else "cached_tokens 0: no prefix was reused"
        span = _span(history, output, cap)
        if self.kind == "attention":
            allowed = {span, span - 1, (span - 1) // self.page_size * self.page_size}
            if cached in allowed:
                return None
            if self.pressure and cached < min(allowed) and cached % self.page_size == 0:
                return None  # whole pages evicted under pool pressure (module docstring)
            pressure = ", whole-page shortfalls allowed: pool pressure" if self.pressure else ""
            return (f"cached_tokens {cached} not in {sorted(allowed)} "
                    f"(attention, page {self.page_size}{pressure})")
        floor = self.minimum(history, output, lag, cap)
        if cached < floor:
            allowed = f", checkpoint lag {lag} allowed after a retraction" if lag else ""
            return f"cached_tokens {cached} < {floor} (mamba track interval {self.interval}{allowed})"
        return None


def reference_reuse_problem(cached: int, reference_cached: int) -> str | None:
    """A cached reference (recorded with the cache on and nothing evicted: docs/control.md)
    fixes how much of a follow-up turn came from the cache, so which of its positions hold KV a
    decode wrote; a replay that reused more or less computed other positions by prefill, and on
    kernels whose decode and prefill differ that alone changes the bits."""
    if cached != reference_cached:
        return (f"cached_tokens {cached} != {reference_cached}, what the cached reference "
                "reused (the replay must reuse exactly as much)")
    return None


def isolation_problem(cached: int, key: str | None) -> str | None:
    """A request of a salted group sends a cache key no other request shares, so no token of it
    may come from the cache: any hit is a reuse across cache keys."""
    if cached > 0:
        return (f"cached_tokens {cached} on a request whose cache key {key!r} no other request "
                "sent: reused across cache keys")
    return None


def _span(history: int, output: int, cap: int | None) -> int:
    """The reusable span the rules round down from: `history + output`, or `cap + 1` when prompt
    logprobs from `cap` cut reuse there (the rules reuse at most span - 1 tokens)."""
    span = history + output
    return span if cap is None else min(span, cap + 1)


EXPECTATION_HELP = "use auto, none, any, attention or mamba:INTERVAL"


def check_expectation(text: str) -> None:
    """The form of `--expect-cache`, checked when the options are made, before any server is
    launched (a typo must not cost a server's start-up). A `mamba` without INTERVAL takes the
    server's, checked when it answers (`parse_expectation`)."""
    kind, _, arg = text.partition(":")
    if kind == "mamba" and (not arg or _interval(arg) > 0):
        return
    if kind == "mamba":
        raise UsageError(f"invalid --expect-cache {text!r}: give mamba:INTERVAL with INTERVAL > 0")
    if text not in ("auto", "none", "any", "attention"):
        raise UsageError(f"invalid --expect-cache {text!r}: {EXPECTATION_HELP}")


def _interval(arg: str) -> int:
    try:
        return int(arg)
    except ValueError:
        return 0


def parse_expectation(text: str, server_info: dict[str, Any], model_info: dict[str, Any],
                      api_default: str | None = None) -> CacheExpectation:
    """`auto`, `none`, `any`, `attention` or `mamba:INTERVAL` (INTERVAL may be omitted: from
    server_info)."""
    check_expectation(text)
    page = _positive(server_info.get("page_size"), 1)
    if text == "auto":
        return auto_expectation(server_info, model_info, api_default)
    if text in ("none", "any"):
        return CacheExpectation(text)
    if text == "attention":
        return CacheExpectation("attention", page_size=page)
    arg = text.partition(":")[2]
    interval = _interval(arg) if arg else _positive(server_info.get("mamba_track_interval"), 0)
    if interval <= 0:
        raise UsageError(f"invalid --expect-cache {text!r}: give mamba:INTERVAL with INTERVAL > 0 "
                         "(this server reports no mamba_track_interval)")
    return CacheExpectation("mamba", page_size=page, interval=interval)


def pool_tokens(server_info: dict[str, Any]) -> int | None:
    """SGLang's device KV pool size in tokens (`max_total_num_tokens`, in /server_info itself or
    its scheduler's `internal_states`), or None when the server does not report it."""
    states = server_info.get("internal_states")
    candidates = [server_info.get("max_total_num_tokens")]
    if isinstance(states, list):
        candidates += [s.get("max_total_num_tokens") for s in states if isinstance(s, dict)]
    sizes = [c for c in candidates if _positive(c, 0)]
    return min(sizes) if sizes else None


def with_eviction_pressure(expectation: CacheExpectation, server_info: dict[str, Any],
                           footprint: int) -> CacheExpectation:
    """The expectation, with `pressure` set when `footprint` (the distinct tokens the golden puts
    through the cache: its prefixes once, every request's new tokens and outputs) exceeds the
    server's device pool. Only page-based attention hits are relaxed."""
    pool = pool_tokens(server_info)
    if expectation.kind != "attention" or pool is None or footprint <= pool:
        return expectation
    return replace(expectation, pressure=True)


def auto_expectation(server_info: dict[str, Any], model_info: dict[str, Any],
                     api_default: str | None = None) -> CacheExpectation:
    """Derive the expectation from what the server reports about itself (or, for adapters that
    know better, from their `api_default`).

    A hybrid model is recognised by SGLang's own resolution (`uses_mamba_radix_cache`, 0.5.23);
    model-name markers are the fallback for servers that do not report it. A hybrid server
    tracking states every `mamba_track_interval` tokens gets `mamba:I`; one with the `no_buffer`
    strategy keeps a state only where a request finished (less a replay lag), so only `any`
    reuse can be asked of it.
    """
    if server_flag(server_info, "disable_radix_cache"):
        return CacheExpectation("none")
    if api_default in ("none", "any"):
        return CacheExpectation(api_default)
    page = _positive(server_info.get("page_size"), 1)
    interval = _positive(server_info.get("mamba_track_interval"), 0)
    if not is_hybrid(server_info, model_info):
        return CacheExpectation("attention", page_size=page)
    strategy = server_info.get("mamba_radix_cache_strategy")
    if strategy is not None and strategy not in TRACKING_STRATEGIES:
        return CacheExpectation("any")
    if interval:
        return CacheExpectation("mamba", page_size=page, interval=interval)
    return CacheExpectation("any")


def is_hybrid(server_info: dict[str, Any], model_info: dict[str, Any]) -> bool:
    """SGLang's own answer when the server gives one, else the model-name markers."""
    if server_info.get("uses_mamba_radix_cache") is not None:
        return server_flag(server_info, "uses_mamba_radix_cache")
    described = " ".join(
        str(x).lower()
        for x in (model_info.get("model_type"), model_info.get("architectures"),
                  model_info.get("model_path"), server_info.get("model_path"))
    )
    return bool(server_info.get("mamba_track_interval")) and any(m in described for m in HYBRID_MARKERS)


def server_flag(server_info: dict[str, Any], key: str) -> bool:
    """A boolean server setting, read strictly: absent or null is false, true/false are
    themselves, anything else (the string "false", 0) is a MalformedResponse, because guessing
    could silently switch a cache check off."""
    value = server_info.get(key)
    if value is None or isinstance(value, bool):
        return bool(value)
    raise MalformedResponse(f"server setting {key} is {str(value)[:40]!r}, not true or false")


def _positive(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


@dataclass
class HitTally:
    """Hit lengths and tiers over a replay, for the report and --require-tier."""

    lengths: Counter[int] = field(default_factory=Counter)
    tiers: Counter[str] = field(default_factory=Counter)

    def add(self, cached: int, details: dict[str, int]) -> None:
        self.lengths[cached] += 1
        for tier, n in details.items():
            if n > 0:
                self.tiers[tier] += n

    def add_sources(self, before: dict[str, int] | None, after: dict[str, int] | None) -> None:
        """Tier counts a server keeps apart from its answers (cumulative counters read before
        and after a repeat): the difference is what this repeat was served from each tier."""
        if before is None or after is None:
            return
        for tier, n in after.items():
            if n - before.get(tier, 0) > 0:
                self.tiers[tier] += n - before.get(tier, 0)

    def histogram(self) -> dict[str, int]:
        return {str(k): v for k, v in sorted(self.lengths.items())}
