"""Compare one request's replayed outputs against the golden's, bit for bit.

Per request: token ids first; positions after the first differing token are not compared (their
context differs). Then the logprob of each compared token, by bit pattern. Then the top-k lists
with SGLang's tie rule: two top-k maps are equal when every shared token has the identical value
and every token present in only one of them has a value equal to the other map's minimum.

A `Policy` turns the measurements into pass/fail:
- `exact`: every compared bit identical (the default, and the point of this tool);
- `kl:THR`: no token divergence and mean KL (SGLang's estimator mean((exp(r)-1)-r), r = replay -
  golden logprob) <= THR;
- `ulp:N`: no token divergence and every compared value within N float32 ULPs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from replay.judge.top_k import top_k_rows_equal
from replay.utils.bits import ULP_INFINITE, same_bits, ulp_distance
from replay.utils.errors import UsageError

IDENTICAL = "identical"
LOGPROB_DRIFT = "logprob_drift"
TOKEN_DIVERGENCE = "token_divergence"
PROMPT_LOGPROB_DRIFT = "prompt_logprob_drift"
POLICY_KINDS = ("exact", "kl", "ulp")
# what an identical request keeps per position: nothing (one shared, read-only pair of arrays,
# so a long replay's outcomes hold no array of their own)
NO_DELTA = np.zeros(0, np.float64)
NO_ULPS = np.zeros(0, np.int64)
NO_DELTA.flags.writeable = NO_ULPS.flags.writeable = False


class Outputs(Protocol):
    output_ids: np.ndarray
    logprobs: np.ndarray
    top_ids: np.ndarray | None
    top_logprobs: np.ndarray | None


@dataclass(frozen=True)
class Policy:
    """How measured differences turn into pass/fail (the module docstring lists the kinds).
    `passes` is the one rule: the output and the prompt-logprob diffs both ask it."""

    kind: str  # one of POLICY_KINDS
    kl_threshold: float = 0.0
    max_ulp: int = 0

    def __post_init__(self) -> None:
        if self.kind not in POLICY_KINDS:
            raise UsageError(f"invalid policy kind {self.kind!r}: use {', '.join(POLICY_KINDS)}")

    def __str__(self) -> str:
        return {"kl": f"kl:{self.kl_threshold:g}", "ulp": f"ulp:{self.max_ulp}"}.get(self.kind, "exact")

    def passes(self, *, identical: bool, comparable: bool, mean_kl: float, max_ulp: int,
               same_members: bool = True) -> bool:
        """Identical bits always pass. Otherwise, only comparable values (the same tokens, the
        same length) can pass, and only under a tolerant policy: `kl` bounds the mean KL,
        `ulp` bounds every value's ULP distance and lets top-k rows differ only in the values
        of shared tokens (`same_members`)."""
        if identical:
            return True
        if not comparable:
            return False
        if self.kind == "kl":
            return bool(np.isfinite(mean_kl)) and mean_kl <= self.kl_threshold
        if self.kind == "ulp":
            return max_ulp <= self.max_ulp and same_members
        return False  # exact

    @classmethod
    def parse(cls, text: str) -> "Policy":
        kind, _, arg = text.partition(":")
        try:
            if kind == "exact" and not arg:
                return cls("exact")
            if kind == "kl" and arg:
                thr = float(arg)
                if thr >= 0:
                    return cls("kl", kl_threshold=thr)
            if kind == "ulp" and arg:
                n = int(arg)
                if n >= 0:
                    return cls("ulp", max_ulp=n)
        except ValueError:
            pass
        raise UsageError(f"invalid policy {text!r}: use exact, kl:THRESHOLD or ulp:N")


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first position where replay and golden differ."""

    position: int  # 0-based output index
    kind: str  # "token" | "logprob" | "top_k"
    golden_token: int
    replay_token: int
    golden_logprob: float
    replay_logprob: float
    ulp: int


@dataclass(frozen=True, slots=True)
class RequestDiff:
    status: str  # identical | logprob_drift | token_divergence
    compared: int  # output positions compared (up to and including a token divergence)
    first: Divergence | None  # the earliest difference of any kind
    token_position: int | None  # where the chosen tokens first differ, if they do
    max_ulp: int  # over compared token logprobs and shared top-k values
    mean_kl: float  # over positions before any token divergence
    passed: bool  # under the policy
    abs_delta: np.ndarray  # |replay - golden| logprob per compared position; empty if identical
    ulp: np.ndarray  # ULP distance per compared position (int64); empty if identical


@dataclass(frozen=True, slots=True)
class PromptDiff:
    """Prompt logprobs (a golden recorded with `prompt_logprobs`), compared like output
    logprobs: bit patterns, position by position (the tokens are the inputs, so the same)."""

    compared: int  # positions compared (the shorter side's length)
    identical: bool  # same length and every bit equal
    first_position: int | None  # index into the prompt logprobs of the first difference
    golden_logprob: float
    replay_logprob: float
    ulp: int  # at the first difference
    max_ulp: int
    mean_kl: float
    passed: bool  # under the policy (a length difference never passes)


def diff_prompt_logprobs(golden: np.ndarray, replay: np.ndarray | None,
                         policy: Policy) -> PromptDiff:
    replay = np.zeros(0, np.float64) if replay is None else replay
    n = min(len(golden), len(replay))
    g, r = np.asarray(golden[:n], np.float64), np.asarray(replay[:n], np.float64)
    equal = same_bits(g, r)
    same_length = len(golden) == len(replay)
    if equal.all() and same_length:
        return PromptDiff(n, True, None, float("nan"), float("nan"), 0, 0, 0.0, True)
    ulps = ulp_distance(g, r) if n else np.zeros(0, np.int64)
    bad = np.flatnonzero(~equal)
    first = int(bad[0]) if bad.size else n
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.expm1(r - g) - (r - g)
    mean_kl = float(terms.mean()) if n else 0.0
    max_ulp = int(ulps.max(initial=0))
    passed = policy.passes(identical=False, comparable=same_length, mean_kl=mean_kl,
                           max_ulp=max_ulp)
    return PromptDiff(
        compared=n, identical=False, first_position=first,
        golden_logprob=float(golden[first]) if first < len(golden) else float("nan"),
        replay_logprob=float(replay[first]) if first < len(replay) else float("nan"),
        ulp=int(ulps[first]) if first < n else int(ULP_INFINITE),
        max_ulp=max_ulp, mean_kl=mean_kl, passed=passed,
    )


def diff_outputs(golden: Outputs, replay: Outputs, policy: Policy) -> RequestDiff:
    identical = _identical(golden, replay)
    if identical is not None:
        return identical
    g_ids, r_ids = golden.output_ids, replay.output_ids
    n = min(len(g_ids), len(r_ids))
    mismatch = np.flatnonzero(g_ids[:n] != r_ids[:n])
    token_at = int(mismatch[0]) if mismatch.size else (n if len(g_ids) != len(r_ids) else -1)
    same_ctx = token_at if token_at >= 0 else n  # positions whose context and token agree
    compared = min(n, same_ctx + 1) if token_at >= 0 else n

    g_lp, r_lp = golden.logprobs[:compared], replay.logprobs[:compared]
    lp_equal = same_bits(g_lp, r_lp)
    # identical bits are 0 ULP apart: the distance is worth computing only when some differ
    ulps = np.zeros(compared, np.int64) if lp_equal.all() else ulp_distance(g_lp, r_lp)
    with np.errstate(invalid="ignore", over="ignore"):
        abs_delta = np.abs(r_lp - g_lp)
        r = r_lp[:same_ctx] - g_lp[:same_ctx]
        kl_terms = np.expm1(r) - r
    mean_kl = float(kl_terms.mean()) if kl_terms.size else 0.0

    top_ok, top_members_ok, top_ulp = _compare_top(golden, replay, compared)
    token_ulps = ulps[:same_ctx]
    max_ulp = int(max(token_ulps.max(initial=0), top_ulp.max(initial=0)))

    first = _first_divergence(g_ids, r_ids, golden.logprobs, replay.logprobs, ulps,
                              lp_equal, top_ok, token_at, same_ctx)
    if token_at >= 0:
        status = TOKEN_DIVERGENCE
    elif first is not None:
        status = LOGPROB_DRIFT
    else:
        status = IDENTICAL
    passed = policy.passes(identical=status == IDENTICAL, comparable=status != TOKEN_DIVERGENCE,
                           mean_kl=mean_kl, max_ulp=max_ulp,
                           same_members=bool(top_members_ok.all()))
    token_position = token_at if token_at >= 0 else None
    if status == IDENTICAL:  # nothing to show per position: keep memory flat on long runs
        abs_delta, ulps = NO_DELTA, NO_ULPS
    return RequestDiff(status, compared, first, token_position, max_ulp, mean_kl, passed,
                       abs_delta, ulps)


def _identical(golden: Outputs, replay: Outputs) -> RequestDiff | None:
    """The usual verdict in a few whole-array comparisons: every token, logprob bit and top-k
    entry the same (and no NaN, whose KL term the full path reports). None otherwise."""
    g_lp, r_lp = golden.logprobs, replay.logprobs
    if not (np.array_equal(golden.output_ids, replay.output_ids)
            and np.array_equal(np.asarray(g_lp, np.float64).view(np.uint64),
                               np.asarray(r_lp, np.float64).view(np.uint64))
            and not np.isnan(g_lp).any()):
        return None
    if (golden.top_ids is None) != (replay.top_ids is None):
        return None
    if golden.top_ids is not None and not (
            np.array_equal(golden.top_ids, replay.top_ids)
            and np.array_equal(np.asarray(golden.top_logprobs, np.float64).view(np.uint64),
                               np.asarray(replay.top_logprobs, np.float64).view(np.uint64))):
        return None
    return identical_diff(len(g_lp))


@functools.lru_cache(maxsize=64)
def identical_diff(compared: int) -> RequestDiff:
    """The diff of an identical answer of `compared` positions: one shared (frozen) instance
    per length, so a replay of 100k identical requests holds a handful."""
    return RequestDiff(IDENTICAL, compared, None, None, 0, 0.0, True, NO_DELTA, NO_ULPS)


def _first_divergence(g_ids, r_ids, g_lp, r_lp, ulps, lp_equal, top_ok, token_at, same_ctx):  # type: ignore[no-untyped-def]
    bad = ~lp_equal[:same_ctx] | ~top_ok[:same_ctx]
    drift_at = int(np.flatnonzero(bad)[0]) if bad.any() else -1
    if drift_at < 0 and token_at < 0:
        return None
    if drift_at >= 0:
        pos, kind = drift_at, ("logprob" if not lp_equal[drift_at] else "top_k")
    else:
        pos, kind = token_at, "token"
    has = pos < len(g_ids) and pos < len(r_ids)
    return Divergence(
        position=pos,
        kind=kind,
        golden_token=int(g_ids[pos]) if pos < len(g_ids) else -1,
        replay_token=int(r_ids[pos]) if pos < len(r_ids) else -1,
        golden_logprob=float(g_lp[pos]) if pos < len(g_lp) else float("nan"),
        replay_logprob=float(r_lp[pos]) if pos < len(r_lp) else float("nan"),
        ulp=int(ulps[pos]) if has and pos < len(ulps) else int(ULP_INFINITE),
    )


def _compare_top(
    golden: Outputs, replay: Outputs, compared: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per compared position: top-k equal under the tie rule? the same tokens (up to the tie
    rule)? and the max ULP distance over shared tokens.

    Rows that are identical (ids and value bits) are settled in one vectorized pass; the others
    by the tie rule, all at once (replay/judge/top_k.py).
    """
    ok = np.ones(compared, dtype=bool)
    members_ok = np.ones(compared, dtype=bool)
    worst = np.zeros(compared, dtype=np.int64)
    if golden.top_ids is None or replay.top_ids is None or compared == 0:
        return ok, members_ok, worst
    gi, ri = golden.top_ids[:compared], replay.top_ids[:compared]
    gv, rv = golden.top_logprobs[:compared], replay.top_logprobs[:compared]
    if gi.shape[1] != ri.shape[1]:
        raise UsageError(f"top-k width differs: golden {gi.shape[1]}, replay {ri.shape[1]}")
    row_same = np.all(gi == ri, axis=1) & np.all(same_bits(gv, rv), axis=1)
    differ = np.flatnonzero(~row_same)
    if differ.size:
        ok[differ], members_ok[differ], worst[differ] = top_k_rows_equal(
            gi[differ], gv[differ], ri[differ], rv[differ])
    return ok, members_ok, worst
