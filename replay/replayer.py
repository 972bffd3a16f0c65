"""Replay a golden against a server and judge every request.

Exactly the golden's inputs are sent: turn t+1 carries the golden's turn-t output, whatever the
replay produced, so one divergence never cascades into the rest of the tree. Each repeat starts
from an empty cache (`/flush_cache`), so its hits come from its own earlier turns. Results are
diffed as they arrive and only the judgement is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay.cache_check import CacheExpectation, HitTally, parse_expectation
from replay.client import ServerClient
from replay.diff import IDENTICAL, Policy, diff_outputs
from replay.errors import ModelMismatch, NumericsMismatch
from replay.fingerprint import model_identity, model_mismatch, source_meta, vocab_size
from replay.golden import Golden
from replay.numerics import compare_numerics
from replay.protocol import Completion
from replay.report import ReplayResult, RequestOutcome
from replay.runner import Job, run_jobs

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ReplayOptions:
    policy: Policy = Policy("exact")
    schedule: str = "lockstep"
    repeat: int = 1
    expect_cache: str = "auto"
    require_tier: str | None = None
    allow_model_mismatch: bool = False
    allow_numerics_mismatch: bool = False
    flush: bool = True  # empty the server's cache before each repeat


def golden_jobs(golden: Golden) -> list[Job]:
    return [
        Job(index=i, id=r.id, group=r.group, branch=r.branch, turn=r.turn, parent=r.parent,
            max_new_tokens=r.max_new_tokens)
        for i, r in enumerate(golden.requests)
    ]


def check_model(golden: Golden, server_info: dict[str, Any], model_info: dict[str, Any]) -> None:
    recorded = model_identity(golden.meta.get("model_info", {}), golden.meta.get("server_info", {}))
    serving = model_identity(model_info, server_info)
    why = model_mismatch(recorded, serving)
    if why:
        raise ModelMismatch(f"{why} (pass --allow-model-mismatch to replay anyway)")


async def replay(client: ServerClient, golden: Golden, golden_name: str, options: ReplayOptions,
                 progress: Progress | None = None) -> ReplayResult:
    server_info = await client.server_info()
    model_info = await client.model_info()
    if not options.allow_model_mismatch:
        check_model(golden, server_info, model_info)
    numerics = compare_numerics(golden.meta.get("server_info", {}), server_info)
    if numerics.differing and not options.allow_numerics_mismatch:
        raise NumericsMismatch(f"{numerics.mismatch_line()} (pass --allow-numerics-mismatch "
                               "to replay anyway)")
    expectation = parse_expectation(options.expect_cache, server_info, model_info)
    vocab = vocab_size(model_info, server_info)
    inputs = [golden.input_ids(i) for i in range(len(golden.requests))]
    tally = HitTally()
    result = ReplayResult(
        golden=golden_name, server=client.url, policy=str(options.policy),
        repeats=options.repeat, expectation=str(expectation), require_tier=options.require_tier,
        golden_meta=golden.meta,
        server_meta=source_meta(client.url, server_info, model_info, api=client.api.name),
        numerics=numerics.as_dict(allowed=options.allow_numerics_mismatch),
    )
    for rep in range(options.repeat):
        if options.flush:
            await client.flush_cache()

        def on_done(job: Job, completion: Completion, rep: int = rep) -> None:
            outcome = judge(golden, job.index, inputs, completion, rep, options.policy, expectation)
            tally.add(completion.cached_tokens, completion.cached_details)
            result.outcomes.append(outcome)
            if progress:
                progress(job.id)

        await run_jobs(client, golden_jobs(golden), inputs.__getitem__, on_done,
                       schedule=options.schedule, top_k=golden.top_k, vocab_size=vocab)
    order = {r.id: i for i, r in enumerate(golden.requests)}
    result.outcomes.sort(key=lambda o: (o.repeat, order[o.id]))
    result.hit_lengths = tally.histogram()
    result.tiers = dict(tally.tiers)
    return result


def judge(golden: Golden, i: int, inputs: list[np.ndarray], completion: Completion, rep: int,
          policy: Policy, expectation: CacheExpectation) -> RequestOutcome:
    req = golden.requests[i]
    diff = diff_outputs(req, completion, policy)
    history = output = 0
    if req.parent >= 0:
        history = len(inputs[req.parent])
        output = len(golden.requests[req.parent].output_ids)
    problem = expectation.problem(turn=req.turn, history=history, output=output,
                                  cached=completion.cached_tokens, prompt=len(inputs[i]))
    expected = expectation.minimum(history, output) if req.turn > 0 and expectation.kind != "none" else None
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
        cache_problem=problem, top=top,
    )


def _top_pairs(ids: np.ndarray, vals: np.ndarray) -> list[list[Any]]:
    return [[int(t), float(v)] for t, v in zip(ids, vals) if t >= 0]
