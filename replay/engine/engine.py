"""The LLM engine: model, KV pool, prefix cache and scheduler, driven by one loop thread.

Callers `submit` requests from any thread and get a callback when one finishes. The loop thread
owns all scheduling state. With overlap scheduling on, a single forward worker thread runs step N
while the loop plans step N+1 and then processes step N's results (SGLang's overlap event loop);
with it off, the loop runs each step itself. Both paths call the same functions, and the model is
exact, so the bits cannot depend on the choice.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

import torch

from replay.engine.config import get_config
from replay.engine.faults import Faults
from replay.engine.host_tier import make_host_pool
from replay.engine.kv_pool import KVPool
from replay.engine.model import ForwardItem, HybridModel
from replay.engine.options import EngineOptions
from replay.engine.radix_cache import RadixCache
from replay.engine.sampling import GREEDY, Sampler, SamplingParams
from replay.engine.scheduler import Batch, Scheduler, StepOutput
from replay.engine.sequence import Sequence
from replay.engine.storage_tier import FileStorage

VERSION = "golden-replay-engine 0.1.0"
OnFinish = Callable[[Sequence], None]
OnStep = Callable[[list[Sequence]], None]


class ModelRunner:
    """Runs one planned batch: gathers past K/V, calls the model, stores new K/V and state, and
    chooses each request's next token."""

    def __init__(self, model: HybridModel, pool: KVPool, faults: Faults) -> None:
        self.model = model
        self.pool = pool
        self.faults = faults
        self.sampler = Sampler()

    def run(self, batch: Batch) -> StepOutput:
        items = []
        for chunk in batch.chunks:
            seq = chunk.seq
            prefill = chunk.tokens is not None
            tokens = chunk.tokens if prefill else [seq.next_input]
            items.append(ForwardItem(
                tokens=torch.tensor(tokens, dtype=torch.int64, device=self.model.device),
                start=chunk.start,
                past_kv=self.pool.gather(seq.pages, chunk.start),
                ssm=seq.ssm,
                logprob_rows=chunk.logprob_rows,
                k_splits=self.faults.k_splits(seq.prompt_len - seq.reused) if prefill else 1,
            ))
        results = self.model.forward(items)
        tokens, reported = [], []
        for chunk, result in zip(batch.chunks, results):
            seq = chunk.seq
            self.pool.write(seq.pages, chunk.start, result.new_kv)
            seq.ssm = result.ssm
            token, logprobs = self.sampler.choose(result.logits, result.logprobs, seq.sampling,
                                                  chunk.end - 1)
            seq.next_input = token
            tokens.append(token)
            reported.append(logprobs)
        return StepOutput(batch, results, tokens, reported)


class EngineBusy(RuntimeError):
    pass


class LLMEngine:
    """`on_step`, if given, runs on the engine thread after each step's results are processed,
    with that step's sequences (a front end that streams partial outputs uses it)."""

    def __init__(self, options: EngineOptions, model: HybridModel | None = None,
                 on_step: OnStep | None = None) -> None:
        self.options = options
        self._on_step = on_step
        self.model = model or HybridModel(get_config(options.model), options.seed, options.device)
        config = self.model.config
        self.faults = Faults(options.fault)
        self.pool = KVPool(options.max_total_tokens // options.page_size, options.page_size,
                           config.attn_layers, config.n_kv_heads, config.head_dim,
                           self.model.device)
        self.storage: FileStorage | None = None
        self.cache = None if options.disable_radix_cache else self._make_cache()
        hybrid = config.ssm_layers > 0
        self.runner = ModelRunner(self.model, self.pool, self.faults)
        self.scheduler = Scheduler(
            self.pool, self.cache, empty_ssm=self.model.empty_ssm,
            chunked_prefill_size=options.chunked_prefill_size,
            max_running=options.max_running_requests,
            track_interval=options.mamba_track_interval if self.cache and hybrid else None,
            overlap=options.overlap, faults=self.faults, on_finish=self._finished,
        )
        self._callbacks: dict[Sequence, OnFinish] = {}
        self._inbox: queue.Queue = queue.Queue()
        self._post_lock = threading.Lock()  # nothing is posted after "stop"
        self._stopped = False
        self._worker = ThreadPoolExecutor(1, "engine-forward") if options.overlap else None
        self._thread = threading.Thread(target=self._loop, name="engine-scheduler", daemon=True)
        self._thread.start()

    def _make_cache(self) -> RadixCache:
        o = self.options
        host = None
        if o.enable_hierarchical_cache:
            page_bytes = self.model.config.kv_bytes_per_token * o.page_size
            pages = (int(o.hicache_size * 2**30) // page_bytes if o.hicache_size > 0
                     else int(self.pool.allocator.num_pages * o.hicache_ratio))
            host = make_host_pool(o.hicache_mem_layout, max(1, pages), self.pool.page_shape,
                                  self.faults)
            if o.hicache_storage_backend == "file":
                self.storage = FileStorage(o.hicache_storage_dir,
                                           shared=o.hicache_storage_dir is not None)
        return RadixCache(self.pool, track_interval=o.mamba_track_interval,
                          hybrid=self.model.config.ssm_layers > 0, host=host,
                          storage=self.storage, write_policy=o.hicache_write_policy,
                          faults=self.faults)

    # -- public API (any thread) ---------------------------------------------------------------

    def check(self, input_ids: list[int], max_new_tokens: int, logprob_start_len: int = -1) -> None:
        """Raise ValueError (one line) for a request this engine can never serve."""
        c = self.model.config
        if not input_ids:
            raise ValueError("input_ids must not be empty")
        if any(not 0 <= t < c.vocab_size for t in input_ids):
            raise ValueError(f"token ids must be in [0, {c.vocab_size})")
        if max_new_tokens < 0:
            raise ValueError("max_new_tokens must be >= 0")
        if not -1 <= logprob_start_len < len(input_ids):
            raise ValueError(f"logprob_start_len ({logprob_start_len}) must be -1 or below the "
                             f"prompt length ({len(input_ids)})")
        if len(input_ids) + max_new_tokens > c.max_context:
            raise ValueError(f"prompt + max_new_tokens = {len(input_ids) + max_new_tokens} exceeds "
                             f"the model's context of {c.max_context}")
        kv_tokens = len(input_ids) + max(max_new_tokens, 1) - 1
        if kv_tokens > self.options.max_total_tokens:
            raise ValueError(f"the request needs {kv_tokens} KV tokens, "
                             f"more than max_total_tokens = {self.options.max_total_tokens}")

    def submit(self, input_ids: list[int], max_new_tokens: int, top_logprobs_num: int,
               on_finish: OnFinish, *, sampling: SamplingParams = GREEDY,
               logprob_start_len: int = -1) -> Sequence:
        """Queue a request (greedy unless `sampling` says otherwise; prompt logprobs from
        `logprob_start_len` when >= 0); `on_finish(seq)` runs on the engine thread when it is
        done (seq.error is set if the engine failed)."""
        self.check(input_ids, max_new_tokens, logprob_start_len)
        seq = Sequence(uuid.uuid4().hex, list(input_ids), max_new_tokens, top_logprobs_num,
                       sampling=sampling, logprob_start_len=logprob_start_len)
        self._post("add", seq, on_finish)
        return seq

    def generate(self, input_ids: list[int], max_new_tokens: int, top_logprobs_num: int = 0, *,
                 sampling: SamplingParams = GREEDY, logprob_start_len: int = -1) -> Sequence:
        """Blocking convenience: submit and wait."""
        done = threading.Event()
        seq = self.submit(input_ids, max_new_tokens, top_logprobs_num, lambda _: done.set(),
                          sampling=sampling, logprob_start_len=logprob_start_len)
        done.wait()
        return seq

    def request_flush(self) -> Future:
        """Ask the engine thread to empty every cache tier; the future fails with EngineBusy
        while requests are running or waiting (SGLang refuses too)."""
        result: Future = Future()
        self._post("flush", result)
        return result

    def flush_cache(self) -> None:
        self.request_flush().result()

    def close(self) -> None:
        with self._post_lock:
            if not self._stopped:
                self._stopped = True
                self._inbox.put(("stop", None, None))
        self._thread.join()
        if self._worker is not None:
            self._worker.shutdown(wait=True)
        if self.storage is not None:
            self.storage.close()

    def _post(self, kind: str, payload: object, callback: OnFinish | None = None) -> None:
        with self._post_lock:
            if self._stopped:
                raise RuntimeError("the engine is stopped")
            self._inbox.put((kind, payload, callback))

    # -- the loop (engine thread) --------------------------------------------------------------

    def _loop(self) -> None:
        in_flight: Future | None = None
        while self._drain_inbox(block=in_flight is None and not self.scheduler.busy):
            launched: Future | None = None
            try:
                batch = self.scheduler.schedule()
                if batch is None and in_flight is None:
                    if self.scheduler.busy:
                        raise RuntimeError(f"{self.scheduler.busy} requests wait but none fits")
                    continue
                if self._worker is None:
                    self._process(self.runner.run(batch))
                    continue
                launched = self._worker.submit(self.runner.run, batch) if batch else None
                if in_flight is not None:
                    self._process(in_flight.result())
                in_flight = launched
            except Exception as exc:  # a bug or a model error: fail everything, start clean
                wait([f for f in (in_flight, launched) if f is not None])
                in_flight = None
                self._fail_all(f"engine error: {type(exc).__name__}: {exc}")
        if in_flight is not None:
            wait([in_flight])
        self._fail_all("engine stopped")

    def _process(self, output: StepOutput) -> None:
        self.scheduler.process(output)
        if self._on_step is not None:
            self._on_step([chunk.seq for chunk in output.batch.chunks])

    def _drain_inbox(self, block: bool) -> bool:
        """Take new requests and commands; False when told to stop."""
        try:
            message = self._inbox.get(block=block)
        except queue.Empty:
            return True
        while True:
            kind, payload, callback = message
            if kind == "stop":
                return False
            if kind == "add":
                self._callbacks[payload] = callback
                self.scheduler.add(payload)
            elif kind == "flush":
                self._flush(payload)
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                return True

    def _flush(self, result: Future) -> None:
        if self.scheduler.busy:
            result.set_exception(EngineBusy(
                f"cache not flushed: {self.scheduler.busy} requests running or waiting"))
            return
        if self.cache is not None:
            self.cache.reset()
        result.set_result(None)

    def _finished(self, seq: Sequence) -> None:
        callback = self._callbacks.pop(seq, None)
        if callback is not None:
            callback(seq)

    def _fail_all(self, reason: str) -> None:
        for seq in self.scheduler.abort_all():
            seq.error = reason
            self._finished(seq)
        if self.cache is not None:
            self.cache.reset()
        else:
            self.pool.allocator.reset()
