"""Replay a golden against a server and judge every request.

Exactly the golden's inputs are sent: turn t+1 carries the golden's turn-t output, whatever the
replay produced, so one divergence never cascades into the rest of the tree. Each repeat starts
from an empty cache (`/flush_cache`), so its hits come from its own earlier turns. Results are
diffed as they arrive and only the judgement is kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from replay.server.apis.base import Completion, RequestExtras
from replay.judge.cache_check import (
    CacheExpectation,
    HitTally,
    check_expectation,
    isolation_problem,
    parse_expectation,
    reference_reuse_problem,
    with_eviction_pressure,
)
from replay.server.connection import Connection
from replay.judge.diff import IDENTICAL, Policy, diff_outputs, diff_prompt_logprobs
from replay.utils.errors import ModelMismatch, NumericsMismatch, UsageError
from replay.golden.fingerprint import model_identity, model_mismatch, source_meta, vocab_size
from replay.golden.model import Golden
from replay.golden.tree import cache_key, input_lengths
from replay.judge.numerics import compare_numerics
from replay.report.results import ReplayResult, RequestOutcome
from replay.run.runner import check_schedule, run_nodes
from replay.utils.shared import SharedValues
from replay.judge.server_checks import check_sampling_defaults

Progress = Callable[[str, bool], None]  # (request id, failed) as each completes
TIERS = ("host", "storage", "device")


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    """How a golden is replayed and judged: the one declaration of the replay options. Checked on
    construction (UsageError, exit 2); keyword-only. `policy` may be given as text (`exact`,
    `kl:THR`, `ulp:N`). Each field is the option `--field-name` of `golden replay` (one
    declaration in cli/options.py `REPLAY_FLAGS`; `replay_argv` writes it back);
    tests/unit/run/test_options_parity.py keeps the three in step."""

    policy: Policy = Policy("exact")
    schedule: str = "lockstep"
    repeat: int = 1
    expect_cache: str = "auto"
    require_tier: str | None = None
    allow_model_mismatch: bool = False
    allow_numerics_mismatch: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.policy, str):
            object.__setattr__(self, "policy", Policy.parse(self.policy))
        check_schedule(self.schedule)
        check_expectation(self.expect_cache)
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 1:
            raise UsageError("--repeat must be >= 1")
        if self.require_tier not in (None, *TIERS):
            raise UsageError(f"invalid --require-tier {self.require_tier!r}: use host or storage")


def option_flag(name: str) -> str:
    """The command-line flag of a ReplayOptions field: `allow_model_mismatch` ->
    `--allow-model-mismatch`."""
    return "--" + name.replace("_", "-")


def replay_argv(options: ReplayOptions) -> list[str]:
    """The `golden replay` arguments that rebuild `options` (repro.sh): every valued option with
    its value, every true switch by its flag, None and false left out (their defaults)."""
    argv: list[str] = []
    for f in fields(options):
        value = getattr(options, f.name)
        if value is None or value is False:
            continue
        argv += [option_flag(f.name)] if value is True else [option_flag(f.name), str(value)]
    return argv


def check_model(golden: Golden, server_info: dict[str, Any], model_info: dict[str, Any]) -> None:
    recorded = model_identity(golden.meta.get("model_info", {}), golden.meta.get("server_info", {}))
    serving = model_identity(model_info, server_info)
    why = model_mismatch(recorded, serving)
    if why:
        raise ModelMismatch(f"{why} (pass --allow-model-mismatch to replay anyway)")


async def replay(conn: Connection, golden: Golden, golden_name: str, options: ReplayOptions,
                 progress: Progress | None = None) -> ReplayResult:
    server_info = await conn.server_info()
    model_info = await conn.model_info()
    if not options.allow_model_mismatch:
        check_model(golden, server_info, model_info)
    numerics = compare_numerics(golden.meta.get("server_info", {}), server_info)
    if numerics.differing and not options.allow_numerics_mismatch:
        raise NumericsMismatch(f"{numerics.mismatch_line()} (pass --allow-numerics-mismatch "
                               "to replay anyway)", numerics.as_dict(allowed=False))
    check_sampling_defaults(model_info, {**golden.sampling, "max_new_tokens": 0})
    expectation = parse_expectation(options.expect_cache, server_info, model_info,
                                    conn.api.expect_cache_auto)
    expectation = with_eviction_pressure(expectation, server_info, footprint(golden))
    vocab = vocab_size(model_info, server_info)
    nodes = golden.nodes
    columns = golden.columns
    parents = columns.parent.tolist()
    input_lens = input_lengths(columns, golden.prefixes, golden.output_lengths())
    tally = HitTally()
    shared = SharedValues()  # one dict per distinct cached-tokens-per-tier answer
    result = ReplayResult(
        golden=golden_name, server=conn.url, policy=str(options.policy),
        repeats=options.repeat, expectation=str(expectation), require_tier=options.require_tier,
        cache_expected=expectation.kind != "none", hits_possible=shares_prefixes(golden),
        golden_meta=golden.meta,
        server_meta=source_meta(conn.url, server_info, model_info, api=conn.api.name,
                                flush=conn.api.flush_note),
        numerics=numerics.as_dict(allowed=options.allow_numerics_mismatch),
    )
    lag = retraction_lag(server_info, expectation)
    salted = int(golden.scenario.get("salted", 0))
    starts = golden.prompt_starts

    def extras_for(i: int) -> RequestExtras:
        return RequestExtras(starts[i], cache_key(nodes[i], salted))

    with_extras = any(start >= 0 for start in starts) or salted
    for rep in range(options.repeat):
        await conn.flush_cache()
        if await conn.clear_storage(server_info):
            result.storage_cleared += 1
        retracted: set[int] = set()  # requests the server retracted (few: a set, not a table)
        placed: list[RequestOutcome | None] = [None] * len(nodes)  # golden order, as they come

        def on_done(i: int, completion: Completion, rep: int = rep,
                    retracted: set[int] = retracted,
                    placed: list[RequestOutcome | None] = placed) -> None:
            if completion.num_retractions > 0:
                retracted.add(i)
            parent = parents[i]
            allowed = lag if parent in retracted else 0
            outcome = judge(golden, i, input_lens, completion, rep, options.policy, expectation,
                            allowed, salted)
            tally.add(completion.cached_tokens, completion.cached_details)
            outcome.cached_details = shared(outcome.cached_details)
            placed[i] = outcome
            if progress:
                progress(outcome.id, not outcome.passed)

        sources_before = await conn.hit_sources()
        await run_nodes(conn, nodes, golden.input_ids, on_done, columns=columns,
                        schedule=options.schedule, top_k=golden.top_k, vocab_size=vocab,
                        extras_for=extras_for if with_extras else None)
        tally.add_sources(sources_before, await conn.hit_sources())
        result.outcomes += [o for o in placed if o is not None]
    result.hit_lengths = tally.histogram()
    result.tiers = dict(tally.tiers)
    return result


def shares_prefixes(golden: Golden) -> bool:
    """Whether any request could be served from the cache: a follow-up turn (its history) or a
    second request in a group (the group's prefix)."""
    columns = golden.columns
    return bool((columns.parent >= 0).any()) or len(np.unique(columns.group)) < len(columns)


def footprint(golden: Golden) -> int:
    """The distinct tokens a golden puts through a prefix cache: each group's shared prefix once,
    then every request's own new tokens and its output (the radix tree it grows)."""
    prefixes = sum(len(p) for p in golden.prefixes)
    return (prefixes + int(golden.columns.new_lengths.sum())
            + int(golden.output_lengths().sum()))


def retraction_lag(server_info: dict[str, Any], expectation: CacheExpectation) -> int:
    """SGLang's allowed checkpoint lag after a retraction (kl_multiturn_utils'
    `make_mamba_decode_assert`): a resumed prefill tracks states relative to its cached prefix,
    so the kept checkpoint may lag the decode boundary by less than one prefill chunk."""
    chunk = server_info.get("chunked_prefill_size")
    if isinstance(chunk, int) and not isinstance(chunk, bool) and chunk > 0:
        return chunk - 1
    return max(0, expectation.interval - 1)


def judge(golden: Golden, i: int, input_lens: Sequence[int], completion: Completion, rep: int,
          policy: Policy, expectation: CacheExpectation, lag: int = 0,
          salted: int = 0) -> RequestOutcome:
    """Request i's outcome: its answer diffed against the golden's, its cache hit checked
    (`input_lens`: every request's input length)."""
    req = golden.requests[i]
    diff = diff_outputs(req, completion, policy)
    prompt = (diff_prompt_logprobs(req.prompt_logprobs, completion.prompt_logprobs, policy)
              if req.prompt_logprobs is not None else None)
    history = output = 0
    if req.parent >= 0:
        history = int(input_lens[req.parent])
        output = len(golden.output_of(req.parent))
    cap = req.prompt_logprob_start if req.prompt_logprob_start >= 0 else None
    key = cache_key(req, salted)
    if key is not None:  # a cache key of its own: nothing may be reused
        problem = isolation_problem(completion.cached_tokens, key)
        expected = None
    else:
        problem = expectation.problem(turn=req.turn, history=history, output=output,
                                      cached=completion.cached_tokens, prompt=int(input_lens[i]),
                                      lag=lag, cap=cap)
        expected = (expectation.minimum(history, output, lag, cap)
                    if req.turn > 0 and expectation.kind != "none" else None)
        if golden.meta.get("reference") == "cached" and req.turn > 0:
            problem = problem or reference_reuse_problem(completion.cached_tokens,
                                                         req.cached_tokens)
            expected = req.cached_tokens
    top = None
    if diff.status != IDENTICAL and diff.first is not None and req.top_ids is not None \
            and completion.top_ids is not None:
        p = diff.first.position
        top = {
            "position": p,
            "golden": _top_pairs(req.top_ids[p], req.top_logprobs[p]),
            "replay": _top_pairs(completion.top_ids[p], completion.top_logprobs[p]),
        }
    return RequestOutcome(
        id=req.id, repeat=rep, diff=diff, cached_tokens=completion.cached_tokens,
        cached_details=completion.cached_details, expected_min_cached=expected,
        cache_problem=problem, top=top, num_retractions=completion.num_retractions,
        retraction_lag=lag, prompt=prompt, answer_digest=answer_digest(completion),
        misreported_ids=completion.misreported_ids,
    )


def answer_digest(completion: Completion) -> bytes:
    """The sha256 of every bit an answer carries that a replay judges (output ids, logprobs,
    top-k ids and logprobs, prompt logprobs): two servers that answered alike have one digest."""
    h = hashlib.sha256()
    parts = ((completion.output_ids, np.int64), (completion.logprobs, np.float64),
             (completion.top_ids, np.int64), (completion.top_logprobs, np.float64),
             (completion.prompt_logprobs, np.float64))
    for part, dtype in parts:
        h.update(b"-|" if part is None else np.ascontiguousarray(part, dtype).tobytes() + b"|")
    return h.digest()


def _top_pairs(ids: np.ndarray, vals: np.ndarray) -> list[list[Any]]:
    return [[int(t), float(v)] for t, v in zip(ids, vals) if t >= 0]
