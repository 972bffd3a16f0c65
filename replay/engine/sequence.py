"""One request inside the engine: tokens in and out, the pages and state it holds, its progress.

Two threads touch a sequence and never the same fields: the scheduler owns the bookkeeping
(`scheduled`, pages, outputs, cache locks); the forward worker owns the live model state
(`ssm`, `next_input`), because under overlap scheduling only the worker knows a step's result
when the following step runs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from replay.engine.sampling import GREEDY, SamplingParams

if TYPE_CHECKING:
    from replay.engine.model import SSMState
    from replay.engine.radix_nodes import CachedTokens, Node, PendingPage


class SeqState(enum.Enum):
    WAITING = "waiting"  # queued, holds nothing
    PREFILLING = "prefilling"  # admitted; prompt chunks still to schedule
    DECODING = "decoding"  # prompt scheduled; decode steps or results outstanding
    FINISHED = "finished"  # every result processed, pages released


@dataclass(eq=False)
class Sequence:
    rid: str
    input_ids: list[int]
    max_new_tokens: int  # 0: prefill only (SGLang's prefill-only request)
    top_logprobs_num: int = 0
    sampling: SamplingParams = GREEDY
    logprob_start_len: int = -1  # >= 0: prompt logprobs from here (caps prefix reuse at it)
    extra_key: str | None = None  # SGLang's extra cache key: part of the radix key
    state: SeqState = SeqState.WAITING
    error: str | None = None  # set when the engine failed the request
    # Scheduler side.
    scheduled: int = 0  # positions whose forward has been scheduled (cached ones included)
    pages: list[int] = field(default_factory=list)  # page i holds positions [i*P, (i+1)*P)
    tree_pages: set[int] = field(default_factory=set)  # pages the radix cache owns (not ours to free)
    cache_node: Node | None = None  # deepest radix node this sequence locks
    cached: CachedTokens | None = None  # set by the scheduler when the prompt is admitted
    landing: PendingPage | None = None  # host-load-race fault: a page copy still in flight
    pending_steps: int = 0  # scheduled chunks whose results are not processed yet
    retracting: bool = False  # picked for a forced retraction; no new chunks until retracted
    num_retractions: int = 0
    prefill_outputs: int = 0  # output tokens a resumed (retracted) request prefills again
    checkpoints: dict[int, list[SSMState]] = field(default_factory=dict)  # position -> states
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_top: list[tuple[list[int], list[float]]] = field(default_factory=list)
    # Prompt logprobs of positions logprob_start_len + 1 .. prompt_len - 1 (each given the tokens
    # before it), and their top-k rows, filled as prompt chunks complete.
    input_logprobs: list[float] = field(default_factory=list)
    input_top: list[tuple[list[int], list[float]]] = field(default_factory=list)
    # Forward-worker side.
    ssm: list[SSMState] | None = None  # live SSM state after the last computed position
    next_input: int | None = None  # the sampled token the next decode step feeds

    @property
    def prompt_len(self) -> int:
        return len(self.input_ids)

    @property
    def prefill_end(self) -> int:
        """Where this admission's prefill ends: the prompt, plus after a retraction the output
        produced before it (SGLang recomputes both)."""
        return self.prompt_len + self.prefill_outputs

    @property
    def total_positions(self) -> int:
        """Positions that ever get KV: the prompt plus every output token but the last."""
        return self.prompt_len + max(self.max_new_tokens, 1) - 1

    @property
    def all_ids(self) -> list[int]:
        return self.input_ids + self.output_ids

    @property
    def fully_scheduled(self) -> bool:
        return self.scheduled >= self.total_positions

    @property
    def reused(self) -> int:
        """Prompt tokens that came from the prefix cache (0 without one)."""
        return self.cached.total if self.cached is not None else 0

    @property
    def wants_prompt_logprobs(self) -> bool:
        return self.logprob_start_len >= 0

    @property
    def finished(self) -> bool:
        return len(self.output_ids) >= self.max_new_tokens
