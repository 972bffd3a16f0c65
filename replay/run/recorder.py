"""Record a scenario's reference outputs from a server into an in-memory Golden.

`record` asks the server for its settings and model, runs the plan (optionally several times:
`check_determinism`), and refuses a reference whose repeated recordings differ by a bit. The
journal (crash-safe resume) and the atomic write around it belong to `replay.jobs.session`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay.server.apis.base import SAMPLING, Completion, RequestExtras
from replay.server.connection import Connection
from replay.judge.diff import IDENTICAL, Policy, diff_outputs, diff_prompt_logprobs
from replay.utils.errors import MalformedResponse, UsageError
from replay.golden.fingerprint import model_identity, source_meta, vocab_size
from replay.golden.model import Golden, RecordedRequest
from replay.golden.meaning import logprob_problem, top_k_missing
from replay.run.journal import Journal
from replay.run.runner import check_schedule, run_nodes
from replay.golden.scenario import Plan, check_vocab
from replay.judge.server_checks import check_sampling_defaults
from replay.golden.tree import cache_key, input_ids, prompt_logprob_start

Progress = Callable[[str, bool], None]  # (request id, failed: always False) as each completes


CACHE_OFF = "cache-off"  # every request computed from scratch (the default)
CACHED = "cached"  # the device cache on and nothing evicted: reuse as a cached replay's
REFERENCE_KINDS = (CACHE_OFF, CACHED)


@dataclass(frozen=True)
class RecordOptions:
    schedule: str = "lockstep"
    check_determinism: int = 1  # record this many times; all must agree bit for bit
    # Which reference the golden holds (docs/control.md): `cache-off`, or `cached`, recorded on a
    # server with its cache on and a pool nothing is evicted from, so a follow-up turn reuses
    # the KV its parent's decode wrote exactly as a cached replay does; the replay then checks
    # that it reused exactly what the reference reused
    reference: str = CACHE_OFF

    def __post_init__(self) -> None:
        check_schedule(self.schedule)
        if self.reference not in REFERENCE_KINDS:
            raise UsageError(f"invalid --reference {self.reference!r}: use "
                             f"{' or '.join(REFERENCE_KINDS)}")
        if isinstance(self.check_determinism, bool) or not isinstance(self.check_determinism, int) \
                or self.check_determinism < 1:
            raise UsageError("--check-determinism must be >= 1")


class NonDeterministicReference(Exception):
    """Repeated recordings of the reference differ: the golden would be worthless."""


Keep = Callable[[int, Completion], None]  # (request index, its completion) as each completes


async def record_once(conn: Connection, plan: Plan, *, schedule: str, vocab: int | None,
                      progress: Progress | None = None, journal: Journal | None = None,
                      already: dict[int, Completion] | None = None) -> list[Completion]:
    """One recording of the plan; requests in `already` (from a journal) are not sent again."""
    done: dict[int, Completion] = {}
    await record_pass(conn, plan, done.__setitem__, schedule=schedule, vocab=vocab,
                      progress=progress, journal=journal, already=already)
    return [done[i] for i in range(len(plan.requests))]


async def record_pass(conn: Connection, plan: Plan, keep: Keep, *, schedule: str,
                      vocab: int | None, progress: Progress | None = None,
                      journal: Journal | None = None,
                      already: dict[int, Completion] | None = None,
                      output_of: Callable[[int], np.ndarray] | None = None) -> None:
    """One recording of the plan, each completion handed to `keep` as it completes (those in
    `already`, from a journal, first and not sent again). A later turn's input needs its
    parents' output ids: `output_of(j)` gives those of a request handed to `keep` (a golden
    writer reads them back); without it they are held here (none of the last turn's)."""
    outputs: dict[int, np.ndarray] = {}
    last_turn = max((r.turn for r in plan.requests), default=0)

    def hold(i: int, completion: Completion) -> None:
        if output_of is None and plan.requests[i].turn < last_turn:
            outputs[i] = completion.output_ids
        keep(i, completion)

    def inputs_for(i: int) -> np.ndarray:
        return input_ids(plan.requests, plan.prefixes, output_of or outputs.__getitem__, i)

    def extras_for(i: int) -> RequestExtras:
        return RequestExtras(prompt_start(plan, lambda j: len(inputs_for(j)), i),
                             cache_key(plan.requests[i], plan.spec.salted))

    def on_done(i: int, completion: Completion) -> None:
        refuse_unless_logprobs(plan.requests[i].id, completion, plan.spec.top_k)
        if journal:
            journal.add(i, plan.requests[i].id, completion)
        hold(i, completion)
        if progress:
            progress(plan.requests[i].id, False)

    resumed = sorted((already or {}).keys())
    for i in resumed:
        hold(i, (already or {})[i])
        if progress:
            progress("resumed", False)
    skip = set(resumed)
    remaining = [i for i in range(len(plan.requests)) if i not in skip]
    await run_nodes(conn, plan.requests, inputs_for, on_done, schedule=schedule,
                    top_k=plan.spec.top_k, vocab_size=vocab, only=remaining,
                    extras_for=extras_for if plan.spec.prompt_logprobs or plan.spec.salted
                    else None)


def prompt_start(plan: Plan, input_len_of: Callable[[int], int], i: int) -> int:
    """Request i's `logprob_start_len` in a recording (-1 unless the scenario asks for its
    group: the last `prompt_logprobs` groups)."""
    if plan.requests[i].group < plan.spec.groups - plan.spec.prompt_logprobs:
        return -1
    return prompt_logprob_start(plan.requests, plan.prefixes, input_len_of, i)


def refuse_unless_logprobs(request_id: str, completion: Completion, top_k: int = 0) -> None:
    """A reference whose logprobs are not log-probabilities (NaN, infinite, positive), or that
    sent no top-k where `top_k` was asked, is never recorded: a NaN matches itself bit for bit
    and a missing top-k compares nothing, so the golden would pass against the very server
    that produced it."""
    problem = logprob_problem(completion.logprobs, completion.top_ids, completion.top_logprobs)
    if not problem and completion.prompt_logprobs is not None:
        prompt = logprob_problem(completion.prompt_logprobs, None, None)
        problem = f"prompt {prompt}" if prompt else None
    if problem:
        raise MalformedResponse(f"request {request_id}: the reference's {problem} is not a "
                                "log-probability; refusing to record it")
    missing = top_k_missing(completion.top_ids, len(completion.output_ids), top_k)
    if missing:
        raise MalformedResponse(f"request {request_id}: the reference sent {missing}; refusing "
                                "to record it")


@dataclass(frozen=True)
class ServerFacts:
    """What a recording needs to know about the server before it starts."""

    server_info: dict[str, Any]
    model_info: dict[str, Any]

    @property
    def vocab(self) -> int | None:
        return vocab_size(self.model_info, self.server_info)

    @property
    def model(self) -> str | None:
        return model_identity(self.model_info, self.server_info).label


async def server_facts(conn: Connection) -> ServerFacts:
    return ServerFacts(await conn.server_info(), await conn.model_info())


async def record(conn: Connection, plan: Plan, options: RecordOptions,
                 progress: Progress | None = None, *, facts: ServerFacts | None = None,
                 journal: Journal | None = None,
                 already: dict[int, Completion] | None = None) -> Golden:
    """Record the plan into a Golden. With a `journal`, the first recording journals each
    completed request and skips those in `already` (resumed)."""
    facts = await prepare_recording(conn, plan, options, facts)
    cached = options.reference == CACHED
    runs: list[list[Completion]] = []
    for attempt in range(options.check_determinism):
        if attempt > 0 or (cached and not already):  # a cached reference starts from empty
            await conn.flush_cache()
        runs.append(await record_once(
            conn, plan, schedule=options.schedule, vocab=facts.vocab, progress=progress,
            journal=journal if attempt == 0 else None, already=already if attempt == 0 else None,
        ))
    differences = determinism_differences(plan, runs)
    if differences:
        raise NonDeterministicReference(
            f"{len(differences)} request(s) differ across {len(runs)} recordings; first: "
            + "; ".join(differences[:5])
        )
    meta = recording_meta(conn, facts, options,
                          sum(1 for c in runs[0] if c.misreported_ids))
    return Golden(
        scenario=plan.spec.to_dict(),
        prefixes=plan.prefixes,
        requests=[_recorded(plan, i, runs[0]) for i in range(len(runs[0]))],
        sampling=dict(SAMPLING),
        meta=meta,
    )


async def prepare_recording(conn: Connection, plan: Plan, options: RecordOptions,
                            facts: ServerFacts | None) -> ServerFacts:
    """The server's facts, and the checks a recording makes before its first request."""
    facts = facts or await server_facts(conn)
    check_vocab(plan.spec, facts.vocab)
    check_sampling_defaults(facts.model_info, {**SAMPLING, "max_new_tokens": 0})
    if options.reference == CACHED:
        check_cached_reference(plan, facts.server_info)
    return facts


def recording_meta(conn: Connection, facts: ServerFacts, options: RecordOptions,
                   misreported: int) -> dict[str, Any]:
    """The golden's `meta`: where it was recorded, which reference, what the server got wrong
    (`misreported`: requests whose prompt ids it reported other than sent)."""
    meta = source_meta(conn.url, facts.server_info, facts.model_info, api=conn.api.name,
                       flush=conn.api.flush_note)
    if options.reference == CACHED:  # absent means cache-off, so goldens recorded before read as they did
        meta["reference"] = CACHED
    if misreported:  # the values are the true tokens'; only the reported ids are wrong
        meta["server_misreported_prompt_ids"] = misreported
    return meta


def check_cached_reference(plan: Plan, server_info: dict[str, Any]) -> None:
    """A cached reference needs the cache on, and a pool that holds every token the scenario
    puts through it: an eviction would make the reference's reuse depend on the pool."""
    from replay.judge.cache_check import pool_tokens, server_flag

    if server_flag(server_info, "disable_radix_cache"):
        raise UsageError("--reference cached needs a server with its prefix cache on (this one "
                         "has disable_radix_cache; e.g. --launch sglang-radix)")
    pool = pool_tokens(server_info)
    need = plan_footprint(plan)
    if pool is not None and need > pool:
        raise UsageError(f"--reference cached needs a pool nothing is evicted from: the scenario "
                         f"puts {need} tokens through the cache, the server's pool holds {pool} "
                         "(start it with a larger pool, e.g. no --max-total-tokens)")


def plan_footprint(plan: Plan) -> int:
    """The distinct tokens a plan puts through a prefix cache: each group's prefix once, every
    request's new tokens and its output (the radix tree it grows)."""
    return sum(len(p) for p in plan.prefixes) + sum(len(r.new_tokens) + r.max_new_tokens
                                                    for r in plan.requests)


def determinism_differences(plan: Plan, runs: list[list[Completion]]) -> list[str]:
    exact = Policy("exact")
    found: list[str] = []
    for r, run in enumerate(runs[1:], start=1):
        for i, (a, b) in enumerate(zip(runs[0], run)):
            d = diff_outputs(a, b, exact)
            if d.status != IDENTICAL and d.first is not None:
                found.append(f"{plan.requests[i].id} (run {r}, {d.status} at position "
                             f"{d.first.position})")
            elif a.prompt_logprobs is not None:
                p = diff_prompt_logprobs(a.prompt_logprobs, b.prompt_logprobs, exact)
                if not p.identical:
                    found.append(f"{plan.requests[i].id} (run {r}, prompt logprobs differ at "
                                 f"position {p.first_position})")
    return found


def recorded_request(plan: Plan, i: int, c: Completion,
                     input_len_of: Callable[[int], int]) -> RecordedRequest:
    """Request i of the plan with its answer `c`, as the golden stores it (`input_len_of(j)`:
    request j's input length, for where its prompt logprobs start)."""
    req = plan.requests[i]
    start = prompt_start(plan, input_len_of, i)
    return RecordedRequest(
        id=req.id, group=req.group, branch=req.branch, turn=req.turn, parent=req.parent,
        new_tokens=req.new_tokens, max_new_tokens=req.max_new_tokens,
        output_ids=c.output_ids, logprobs=c.logprobs, top_ids=c.top_ids,
        top_logprobs=c.top_logprobs, cached_tokens=c.cached_tokens,
        cached_details=c.cached_details, finish_reason=c.finish_reason,
        num_retractions=c.num_retractions,
        prompt_logprob_start=start,
        prompt_logprobs=c.prompt_logprobs if start >= 0 else None,
    )


def _recorded(plan: Plan, i: int, run: list[Completion]) -> RecordedRequest:
    return recorded_request(plan, i, run[i], lambda j: len(input_ids(
        plan.requests, plan.prefixes, lambda k: run[k].output_ids, j)))
