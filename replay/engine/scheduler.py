"""Continuous batching: which tokens of which requests go into each forward step.

Every step decodes one token for each running request and spends up to `chunked_prefill_size`
tokens on prompts (one chunk per request: an item's SSM state is only known after its chunk).
With a prefix cache on a hybrid model, chunks also end at track boundaries, so that the state at
every boundary is seen and can be checkpointed.

Bookkeeping never waits for results: with `ignore_eos` a request's length is known, so step N+1
can be planned while step N is still running (overlap scheduling). Results are then processed one
step behind: tokens appended, checkpoints recorded, finished requests inserted into the cache.
Pages for a request's whole life are reserved when it is admitted, so a running request never
needs preemption.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from replay.engine.faults import Faults
from replay.engine.kv_pool import KVPool
from replay.engine.model import ForwardResult, SSMState, top_k
from replay.engine.radix_cache import RadixCache
from replay.engine.sequence import SeqState, Sequence


@dataclass
class Chunk:
    """One forward item: `length` positions of `seq` from `start`. `tokens` is None for a decode
    step, whose input (the previous step's greedy token) only the forward worker knows."""

    seq: Sequence
    start: int
    length: int
    tokens: list[int] | None

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass
class Batch:
    chunks: list[Chunk]


@dataclass
class StepOutput:
    batch: Batch
    results: list[ForwardResult]
    tokens: list[int]  # greedy token after each chunk


class Scheduler:
    def __init__(self, pool: KVPool, cache: RadixCache | None, *,
                 empty_ssm: Callable[[], list[SSMState]], chunked_prefill_size: int, max_running: int, track_interval: int | None,
                 overlap: bool, faults: Faults, on_finish: Callable[[Sequence], None]) -> None:
        self.pool = pool
        self.cache = cache
        self.page_size = pool.page_size
        self.empty_ssm = empty_ssm
        self.chunk_budget = chunked_prefill_size
        self.max_running = max_running
        self.track_interval = track_interval  # None: no checkpoints wanted
        self.overlap = overlap
        self.faults = faults
        self.on_finish = on_finish
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._late: dict[Sequence, int] = {}  # late-ssm-checkpoint fault: boundary owed

    @property
    def busy(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    # -- planning ------------------------------------------------------------------------------

    def schedule(self) -> Batch | None:
        self._admit()
        chunks: list[Chunk] = []
        for seq in self.running:
            if seq.state is SeqState.DECODING and not seq.fully_scheduled:
                chunks.append(Chunk(seq, seq.scheduled, 1, None))
                seq.scheduled += 1
        budget = self.chunk_budget
        for seq in self.running:
            if seq.state is not SeqState.PREFILLING or budget == 0:
                continue
            end = min(seq.prompt_len, seq.scheduled + budget, self._next_boundary(seq.scheduled))
            chunks.append(Chunk(seq, seq.scheduled, end - seq.scheduled,
                                seq.input_ids[seq.scheduled:end]))
            budget -= end - seq.scheduled
            seq.scheduled = end
            if end == seq.prompt_len:
                seq.state = SeqState.DECODING
        return Batch(chunks) if chunks else None

    def _next_boundary(self, position: int) -> int:
        if self.track_interval is None:
            return 1 << 62
        return (position // self.track_interval + 1) * self.track_interval

    def _admit(self) -> None:
        """Admit waiting requests in arrival order while their pages fit."""
        while self.waiting and len(self.running) < self.max_running:
            seq = self.waiting[0]
            pages = -(-seq.total_positions // self.page_size)
            if self.cache is None:
                if pages > self.pool.allocator.available:
                    return
                seq.pages = self.pool.allocator.alloc(pages)
                seq.ssm = self.empty_ssm()
            else:
                match = self.cache.match(seq.input_ids)
                if not self.cache.can_fit(match, pages - len(match.nodes)):
                    self.cache.unlock(match.last)
                    return
                seq.cached, state = self.cache.load(match)
                own = self.cache.alloc(pages - len(match.nodes))
                seq.pages = [n.page for n in match.nodes] + own
                seq.tree_pages = set(seq.pages[:len(match.nodes)])
                seq.cache_node = match.last
                seq.scheduled = match.length
                seq.ssm = state if state is not None else self.empty_ssm()
            self.waiting.popleft()
            seq.state = SeqState.PREFILLING
            self.running.append(seq)

    # -- results -------------------------------------------------------------------------------

    def process(self, output: StepOutput) -> None:
        for chunk, result, token in zip(output.batch.chunks, output.results, output.tokens):
            seq = chunk.seq
            self._record_checkpoint(seq, chunk, result)
            if chunk.end < seq.prompt_len:
                continue  # a prompt chunk before the last: no token yet
            seq.output_ids.append(token)
            seq.output_logprobs.append(float(result.logprobs[token]))
            if seq.top_logprobs_num > 0:
                seq.output_top.append(top_k(result.logprobs, seq.top_logprobs_num))
            if seq.finished:
                self._finish(seq)
            elif chunk.end == seq.prompt_len and self.cache is not None:
                self._cache(seq, seq.prompt_len // self.page_size)  # prefix visible to others now

    def _record_checkpoint(self, seq: Sequence, chunk: Chunk, result: ForwardResult) -> None:
        if self.track_interval is None:
            return
        owed = self._late.pop(seq, None)
        if owed is not None:
            seq.checkpoints[owed] = result.ssm  # the state after owed + 1 tokens: the fault
        if chunk.end % self.track_interval == 0:
            if chunk.tokens is None and self.faults.late_checkpoint(self.overlap):
                self._late[seq] = chunk.end
            else:
                seq.checkpoints[chunk.end] = result.ssm

    def _cache(self, seq: Sequence, n_pages: int) -> None:
        """Insert the request's first n_pages full pages; move its lock to the deepest node."""
        node, adopted = self.cache.insert(seq.all_ids, seq.pages, n_pages, seq.checkpoints)
        self.cache.lock(node)
        self.cache.unlock(seq.cache_node)
        seq.cache_node = node
        seq.tree_pages |= adopted

    def _finish(self, seq: Sequence) -> None:
        if self.cache is not None:
            self._cache(seq, seq.total_positions // self.page_size)
            self.cache.unlock(seq.cache_node)
            seq.cache_node = None
        self.pool.allocator.free([p for p in seq.pages if p not in seq.tree_pages])
        self._late.pop(seq, None)
        seq.checkpoints.clear()
        seq.ssm = None
        seq.state = SeqState.FINISHED
        self.running.remove(seq)
        self.on_finish(seq)

    def abort_all(self) -> list[Sequence]:
        """Drop every request (after an engine error); the caller resets the cache and pool."""
        dropped = list(self.waiting) + self.running
        self.waiting.clear()
        self.running.clear()
        self._late.clear()
        for seq in dropped:
            seq.state = SeqState.FINISHED
        return dropped

