"""What a replay produced: one outcome per request and repeat, and the whole result.

These are plain records; their documented JSON form is `replay.report.document.report_dict`, and every
other view (JUnit, console lines, HTML, merged shards) reads that document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from replay.judge.diff import IDENTICAL, PROMPT_LOGPROB_DRIFT, PromptDiff, RequestDiff
from replay.golden.tree import parse_request_id

CACHE_MISS = "cache_miss"
# The server reported other prompt token ids than were sent, all else identical: the server's
# bug (SGLang's clip of the vocabulary's last id), never a cache verdict (docs/findings/sglang-ids.md)
SERVER_ID_MISMATCH = "server_id_mismatch"
NO_HITS_WARNING = "no request was served from the cache"  # how the zero-hit warning starts


@dataclass(slots=True)
class RequestOutcome:  # slots: a replay of 100k requests holds 100k of these
    id: str
    repeat: int
    diff: RequestDiff
    cached_tokens: int
    cached_details: dict[str, int]
    expected_min_cached: int | None
    cache_problem: str | None
    top: dict[str, Any] | None = None  # top-k of both sides at the first divergence
    num_retractions: int = 0  # times the server retracted this request (meta_info)
    retraction_lag: int = 0  # checkpoint lag allowed because its parent was retracted
    prompt: PromptDiff | None = None  # prompt logprobs, when the golden holds them
    worker: int | None = None  # behind a router: the worker that served it (replay/jobs/routing.py)
    routing_note: str | None = None  # a shortfall the routing explains (not a cache bug)
    # prefill/decode disaggregated: the worker that computed its prompt's KV, the one that got it
    prefill_worker: int | None = None
    decode_worker: int | None = None
    misreported_ids: tuple[Any, ...] = ()  # MisreportedId: prompt ids reported other than sent
    answer_digest: bytes = b""  # sha256 of the answer's bits (ids, logprobs, top-k, prompt
    # logprobs): 32 bytes, written as hex in the report (half what the hex text would hold)
    # With a control replay (replay/report/control.py), for a request that failed: the control's
    # status for it, and whether the control answered with the very same bits
    control_status: str | None = None
    control_passed: bool | None = None
    control_same_bits: bool | None = None
    control_cached_tokens: int | None = None  # what the control reused for this request

    @property
    def status(self) -> str:
        if self.diff.status != IDENTICAL:
            return self.diff.status
        if self.prompt is not None and not self.prompt.identical:
            return PROMPT_LOGPROB_DRIFT
        if self.cache_problem:
            return CACHE_MISS
        return SERVER_ID_MISMATCH if self.misreported_ids else IDENTICAL

    @property
    def passed(self) -> bool:
        prompt_ok = self.prompt is None or self.prompt.passed
        return self.diff.passed and prompt_ok and self.cache_problem is None


@dataclass
class ReplayResult:
    golden: str
    server: str
    policy: str
    repeats: int
    expectation: str
    outcomes: list[RequestOutcome] = field(default_factory=list)
    hit_lengths: dict[str, int] = field(default_factory=dict)
    tiers: dict[str, int] = field(default_factory=dict)
    require_tier: str | None = None
    golden_meta: dict[str, Any] = field(default_factory=dict)
    server_meta: dict[str, Any] = field(default_factory=dict)
    storage_cleared: int = 0  # repeats that started by emptying an attached L3 storage tier
    numerics: dict[str, Any] | None = None  # replay/judge/numerics.py NumericsComparison.as_dict
    cache_expected: bool = False  # the expectation (explicit, or auto from the server) asks for hits
    hits_possible: bool = True  # some request shares a prefix with another (a follow-up turn or
    # a sibling branch): a golden of unrelated single requests can never hit
    replays_a_server: bool = True  # False for `golden diff` (two goldens: no cache was asked)
    routing: dict[str, Any] | None = None  # behind a router: topology, per-worker hit rates
    control: dict[str, Any] | None = None  # the control replay's summary (replay/report/control.py)

    @property
    def storage_hits_after_clear(self) -> list[dict[str, Any]]:
        """First branches (branch 0, turn 0) served from L3 storage in a repeat that began by
        clearing it: the clear did not empty the tier, so the repeat did not start cold. A later
        branch may rightly reuse what its group's first branch wrote to L3 in the same repeat
        (on one server, or through a shared L3), so only first branches tell."""
        if not self.storage_cleared:
            return []
        return [{"id": o.id, "repeat": o.repeat, "storage": o.cached_details.get("storage", 0)}
                for o in self.outcomes
                if o.cached_details.get("storage", 0) > 0
                and (parse_request_id(o.id) or (0, 1, 1))[1:] == (0, 0)]

    @property
    def no_cache_hits(self) -> bool:
        """Whether no request of a replay against a server was served from its cache at all."""
        return (self.replays_a_server and bool(self.outcomes)
                and all(o.cached_tokens == 0 for o in self.outcomes))

    @property
    def hit_problem(self) -> str | None:
        """A replay that never hit the cache proves nothing about it: a fail when the
        expectation asked for hits (whatever each request's own check said)."""
        if self.no_cache_hits and self.cache_expected and self.hits_possible:
            return (f"no request was served from the cache (cached_tokens 0 in all "
                    f"{len(self.outcomes)}), though the cache expectation {self.expectation} "
                    "asks for hits")
        return None

    @property
    def warnings(self) -> list[str]:
        """Things a reader must know that do not change the verdict by themselves."""
        notes = []
        if self.no_cache_hits and self.hit_problem is None:
            notes.append(f"{NO_HITS_WARNING}: this replay proves nothing about the cache (cache "
                         f"expectation {self.expectation})")
        misreported = [o for o in self.outcomes if o.misreported_ids]
        if misreported:
            first = misreported[0].misreported_ids[0]
            notes.append(f"{len(misreported)} request(s) got prompt token ids reported other "
                         f"than sent (first: {misreported[0].id} position {first.position}, sent "
                         f"{first.sent}, reported {first.reported}): the server's bug, not a "
                         "cache verdict (docs/findings/sglang-ids.md)")
        stale = self.storage_hits_after_clear
        if stale:
            notes.append(f"{len(stale)} turn-0 request(s) were served from L3 storage in a "
                         "repeat that began by clearing it: the clear did not empty the tier, so "
                         "the repeat did not start cold")
        if self.require_tier and self.tier_deferred:
            notes.append(f"--require-tier {self.require_tier} is judged over the whole golden "
                         "by `golden report --merge` (this shard alone saw "
                         f"{self.require_tier}={self.tiers.get(self.require_tier, 0)} tokens)")
        return notes

    @property
    def tier_deferred(self) -> bool:
        """A shard of several: whether the tier was used depends on the cache pressure of the
        whole golden (a shard may fit the device pool), so the merge judges it."""
        shard = self.golden_meta.get("shard")
        return isinstance(shard, dict) and shard.get("count", 1) > 1

    @property
    def tier_problem(self) -> str | None:
        if self.require_tier and not self.tier_deferred \
                and self.tiers.get(self.require_tier, 0) == 0:
            seen = ", ".join(f"{k}={v}" for k, v in sorted(self.tiers.items())) or "none"
            return f"no cache hits came from the {self.require_tier} tier (tokens by tier: {seen})"
        return None

    @property
    def passed(self) -> bool:
        return (all(o.passed for o in self.outcomes) and self.tier_problem is None
                and self.hit_problem is None)

    @property
    def failures(self) -> list[RequestOutcome]:
        return [o for o in self.outcomes if not o.passed]
