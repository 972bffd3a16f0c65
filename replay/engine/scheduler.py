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

Prompt logprobs (`logprob_start_len` p >= 0), as SGLang: the reused prefix is capped at p, so
every position from p on is computed, and each prompt chunk returns the logprobs of its tokens
from p on; the request collects them as its chunks complete.
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

    @property
    def logprob_from(self) -> int:
        """First position of this chunk whose next-token logprobs the request wants."""
        if self.tokens is None or not self.seq.wants_prompt_logprobs:
            return self.end - 1
        return min(max(self.seq.logprob_start_len, self.start), self.end - 1)

    @property
    def logprob_rows(self) -> int:
        return self.end - self.logprob_from


@dataclass
class Batch:
    chunks: list[Chunk]


@dataclass
class StepOutput:
    batch: Batch
    results: list[ForwardResult]
    tokens: list[int]  # the token chosen after each chunk
    reported: list  # float32 [vocab] per chunk: the logprobs reported for that token


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
        self._left_behind: Sequence | None = None  # prompt-logprobs-stale-buffer fault

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
        self._land_loads(chunks)
        return Batch(chunks) if chunks else None

    def _land_loads(self, chunks: list[Chunk]) -> None:
        """host-load-race: a host page copy still in flight when its request's first chunk is
        launched lands only if no other request computes in the same step."""
        alone = len({chunk.seq for chunk in chunks}) == 1
        for chunk in chunks:
            pending, chunk.seq.landing = chunk.seq.landing, None
            if pending is not None and self.faults.host_load_landed(alone):
                pending.land(self.pool)

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
                match = self.cache.match(seq.input_ids, self._reuse_limit(seq))
                if not self.cache.can_fit(match, pages - len(match.nodes)):
                    self.cache.unlock(match.last)
                    return
                seq.cached, state, seq.landing = self.cache.load(
                    match, hold_last_host_page=self.faults.host_load_races())
                own = self.cache.alloc(pages - len(match.nodes))
                seq.pages = [n.page for n in match.nodes] + own
                seq.tree_pages = set(seq.pages[:len(match.nodes)])
                seq.cache_node = match.last
                seq.scheduled = match.length
                seq.ssm = state if state is not None else self.empty_ssm()
                self._fill_skipped_prompt_logprobs(seq)
            self.waiting.popleft()
            seq.state = SeqState.PREFILLING
            self.running.append(seq)

    def _reuse_limit(self, seq: Sequence) -> int:
        """At most this many prompt tokens may come from the cache: never the last one, and with
        prompt logprobs never a position whose logprobs are wanted (SGLang's max_prefix_len)."""
        limit = seq.prompt_len - 1
        if seq.wants_prompt_logprobs and self.faults.caps_prefix_for_prompt_logprobs():
            limit = min(limit, seq.logprob_start_len)
        return limit

    def _fill_skipped_prompt_logprobs(self, seq: Sequence) -> None:
        """prompt-logprobs-stale-buffer: positions reused from the cache past logprob_start_len
        never run through the model; their logprob rows are whatever the previous prompt-logprob
        request left in the buffer."""
        first, last = seq.logprob_start_len, min(seq.scheduled, seq.prompt_len - 1)
        if not seq.wants_prompt_logprobs or last <= first:
            return
        stale = self._left_behind
        for i in range(last - first):
            old = i < len(stale.input_logprobs) if stale is not None else False
            seq.input_logprobs.append(stale.input_logprobs[i] if old else 0.0)
            if seq.top_logprobs_num > 0:
                seq.input_top.append(stale.input_top[i] if old and i < len(stale.input_top)
                                     else ([0] * seq.top_logprobs_num, [0.0] * seq.top_logprobs_num))

    # -- results -------------------------------------------------------------------------------

    def process(self, output: StepOutput) -> None:
        for chunk, result, token, reported in zip(output.batch.chunks, output.results,
                                                  output.tokens, output.reported):
            seq = chunk.seq
            self._record_checkpoint(seq, chunk, result)
            if chunk.tokens is not None and seq.wants_prompt_logprobs:
                self._record_prompt_logprobs(seq, chunk, result)
            if chunk.end < seq.prompt_len:
                continue  # a prompt chunk before the last: no token yet
            if seq.max_new_tokens > 0:
                seq.output_ids.append(token)
                seq.output_logprobs.append(float(reported[token]))
                if seq.top_logprobs_num > 0:
                    seq.output_top.append(top_k(reported, seq.top_logprobs_num))
            if seq.finished:
                self._finish(seq)
            elif chunk.end == seq.prompt_len and self.cache is not None:
                self._cache(seq, seq.prompt_len // self.page_size)  # prefix visible to others now

    def _record_prompt_logprobs(self, seq: Sequence, chunk: Chunk, result: ForwardResult) -> None:
        """Row r of the chunk's logprobs follows position logprob_from + r; it scores the next
        prompt token (the row after the last prompt token is the output's, not the prompt's)."""
        for row, position in zip(result.row_logprobs, range(chunk.logprob_from, chunk.end)):
            if position < seq.logprob_start_len or position + 1 >= seq.prompt_len:
                continue
            seq.input_logprobs.append(float(row[seq.input_ids[position + 1]]))
            if seq.top_logprobs_num > 0:
                seq.input_top.append(top_k(row, seq.top_logprobs_num))

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
        if seq.wants_prompt_logprobs:
            self._left_behind = seq
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

