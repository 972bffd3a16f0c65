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

Forced retraction and jitter (test switches, off by default; SGLang's SGLANG_TEST_RETRACT and
SGLANG_TEST_RETRACT_INTERVAL): every `retract_interval` steps one decoding request is retracted
as SGLang picks it (fewest outputs, then longest prompt; never the last one running): once its
in-flight step is processed its own pages are freed, its decode checkpoints dropped, and it
waits again at the head of the queue; readmitted, it prefills prompt + outputs so far from the
cache and decodes on. Its resumed prefill is chunked by budget only, not at track boundaries (a
resumed prefill tracks states relative to its cached prefix, as SGLang's does), so a boundary it
passes inside that prefill keeps no checkpoint: the child's hit may lag by less than one chunk,
the rule `replay.run.replayer.retraction_lag` allows. A seeded `jitter` holds admission back for
a step now and then and shuffles the prefill budget order and each batch's chunk order. Neither
switch may change a bit: the model is exact whatever the batch, chunking or timing.

Prompt logprobs (`logprob_start_len` p >= 0), as SGLang: the reused prefix is capped at p, so
every position from p on is computed, and each prompt chunk returns the logprobs of its tokens
from p on; the request collects them as its chunks complete.
"""

from __future__ import annotations

import random
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
                 overlap: bool, faults: Faults, on_finish: Callable[[Sequence], None],
                 retract_interval: int = 0, jitter_seed: int | None = None) -> None:
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
        self.retract_interval = retract_interval  # 0: never retract
        self._jitter = random.Random(jitter_seed) if jitter_seed is not None else None
        self._steps = 0

    @property
    def busy(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    # -- planning ------------------------------------------------------------------------------

    def schedule(self) -> Batch | None:
        self._steps += 1
        if self.retract_interval and self._steps % self.retract_interval == 0:
            self._pick_retraction()
        if not (self._jitter and self.running and self._jitter.random() < 0.25):
            self._admit()
        chunks = self._plan()
        if not chunks and self.waiting:  # never let a held-back admission stall the engine
            self._admit()
            chunks = self._plan()
        self._land_loads(chunks)
        if self._jitter:
            self._jitter.shuffle(chunks)
        for chunk in chunks:
            chunk.seq.pending_steps += 1
        return Batch(chunks) if chunks else None

    def _plan(self) -> list[Chunk]:
        chunks: list[Chunk] = []
        for seq in self.running:
            if seq.state is SeqState.DECODING and not seq.fully_scheduled and not seq.retracting:
                chunks.append(Chunk(seq, seq.scheduled, 1, None))
                seq.scheduled += 1
        budget = self.chunk_budget
        prefilling = [seq for seq in self.running if seq.state is SeqState.PREFILLING]
        if self._jitter:
            self._jitter.shuffle(prefilling)
        for seq in prefilling:
            if budget == 0:
                break
            end = min(seq.prefill_end, seq.scheduled + budget)
            if not seq.prefill_outputs:  # a resumed prefill is not cut at track boundaries
                end = min(end, self._next_boundary(seq.scheduled))
            chunks.append(Chunk(seq, seq.scheduled, end - seq.scheduled,
                                seq.all_ids[seq.scheduled:end]))
            budget -= end - seq.scheduled
            seq.scheduled = end
            if end == seq.prefill_end:
                seq.state = SeqState.DECODING
        return chunks

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
                match = self.cache.match(seq.all_ids, self._reuse_limit(seq),
                                         namespace=self.faults.cache_namespace(seq.extra_key))
                if not self.cache.can_fit(match, pages - len(match.nodes)):
                    self.cache.unlock(match.last)
                    return
                cached, state, seq.landing = self.cache.load(
                    match, hold_last_host_page=self.faults.host_load_races())
                if seq.cached is None:  # a resumed request reports its first admission's hit
                    seq.cached = cached
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
        limit = seq.prefill_end - 1
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
            seq.pending_steps -= 1
            self._record_checkpoint(seq, chunk, result)
            if chunk.tokens is not None and seq.wants_prompt_logprobs:
                self._record_prompt_logprobs(seq, chunk, result)
            if chunk.end < seq.prefill_end:
                continue  # a prompt chunk before the last: no token yet
            if seq.max_new_tokens > 0:
                seq.output_ids.append(token)
                seq.output_logprobs.append(float(reported[token]))
                if seq.top_logprobs_num > 0:
                    seq.output_top.append(top_k(reported, seq.top_logprobs_num))
            if seq.finished:
                self._finish(seq)
            elif seq.retracting and seq.pending_steps == 0:
                self._retract(seq)
            elif chunk.end == seq.prefill_end and self.cache is not None:
                self._cache(seq, seq.prefill_end // self.page_size)  # prefix visible to others now

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
        node, adopted = self.cache.insert(seq.all_ids, seq.pages, n_pages, seq.checkpoints,
                                          namespace=self.faults.cache_namespace(seq.extra_key))
        self.cache.lock(node)
        self.cache.unlock(seq.cache_node)
        seq.cache_node = node
        seq.tree_pages |= adopted

    def _finish(self, seq: Sequence) -> None:
        if self.cache is not None and seq.ssm is not None and self.track_interval is not None \
                and self.faults.stamps_final_state_on_shorter_key():
            shorter = seq.total_positions // self.page_size * self.page_size
            seq.checkpoints.setdefault(shorter, seq.ssm)  # the state after total_positions
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

    # -- forced retraction ---------------------------------------------------------------------

    def _pick_retraction(self) -> None:
        """SGLang's choice (retract_decode): the decoding request with the fewest outputs, then
        the longest prompt; never the last one running, never one with prompt logprobs (their
        rows are collected once)."""
        candidates = [s for s in self.running if s.state is SeqState.DECODING and not s.retracting
                      and not s.fully_scheduled and not s.wants_prompt_logprobs]
        if len(self.running) < 2 or not candidates:
            return
        seq = min(candidates, key=lambda s: (len(s.output_ids), -s.prompt_len))
        seq.retracting = True
        if seq.pending_steps == 0:
            self._retract(seq)

    def _retract(self, seq: Sequence) -> None:
        """Free what the request holds but the tree, forget its decode checkpoints, and queue it
        first; its outputs so far are kept and prefilled again on readmission."""
        if self.cache is not None:
            self.cache.unlock(seq.cache_node)
        self.pool.allocator.free([p for p in seq.pages if p not in seq.tree_pages])
        self._late.pop(seq, None)
        seq.pages, seq.tree_pages, seq.cache_node = [], set(), None
        seq.checkpoints.clear()
        seq.ssm = None
        seq.retracting = False
        seq.num_retractions += 1
        seq.prefill_outputs = len(seq.output_ids)
        seq.scheduled = 0
        seq.state = SeqState.WAITING
        self.running.remove(seq)
        self.waiting.appendleft(seq)

    def abort_all(self) -> list[Sequence]:
        """Drop every request (after an engine error); the caller resets the cache and pool."""
        dropped = list(self.waiting) + self.running
        self.waiting.clear()
        self.running.clear()
        self._late.clear()
        for seq in dropped:
            seq.state = SeqState.FINISHED
        return dropped

