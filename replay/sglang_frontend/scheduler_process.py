"""The embedded engine as SGLang's scheduler process (`launch_server(run_scheduler_process_func=...)`).

SGLang starts `run_scheduler_process(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank,
pipe_writer)` in a spawned process. This one builds the engine from the resolved ServerArgs,
answers the start-up handshake, and serves SGLang's ZMQ messages exactly where the GPU scheduler
would (sockets as in `scheduler_components/ipc_channels.py`):
- TokenizedGenerateReqInput / BatchTokenizedGenerateReqInput -> engine requests, answered with
  BatchTokenIDOutput chunks (outputs.py) sent from the engine thread after each step;
- GetInternalStateReq, FlushCacheReqInput (busy and deferred `timeout_s` semantics as in
  `flush_wrapper.py`), AbortReq (queued: answered at once; running: finished as aborted at its
  next step), anything else ignored;
- SetInternalStateReq (`/set_internal_state`) with the one knob `engine_fault:<name>` (value 1;
  `engine_fault:none` for none): while idle, a fresh engine with that fault replaces the running
  one (every cache tier empty, as after a start), so one front end serves several faults in turn.
  SGLang's knobs are numeric, so the fault's name rides in the key. Any other knob, or a busy
  engine, answers `updated: false`, as SGLang's scheduler answers a knob it lacks.
Prompt logprobs (`return_logprob` with `logprob_start_len` >= 0) and `extra_key` (the cache salt)
go to the engine as its own HTTP server gives them (the reused prefix capped at the start, reuse
only between equal keys). A request the engine cannot honour (sampling, stop strings, token-id
logprobs, ...) is rejected with a 400 abort naming the field, never served approximately.

Threads: the main thread owns the input socket and the control-reply socket; the engine thread owns
the output socket (it is the only one that sends chunks). `lock` guards the request table.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import zmq
from sglang.srt.managers.io_struct import (
    AbortReq,
    BatchTokenizedGenerateReqInput,
    FlushCacheReqInput,
    FlushCacheReqOutput,
    GetInternalStateReq,
    GetInternalStateReqOutput,
    SetInternalStateReq,
    SetInternalStateReqOutput,
    TokenizedGenerateReqInput,
    sock_recv,
)
from sglang.srt.managers.scheduler_components.output_sender import SenderWrapper
from sglang.srt.mem_cache.hicache_storage import disabled_l3_layout
from sglang.srt.utils.msgspec_utils import msgspec_to_builtins

from replay.engine.engine import EngineBusy, LLMEngine
from replay.engine.faults import FAULTS
from replay.engine.sequence import Sequence
from replay.engine.server import STORAGE_BACKEND_CLASSES
from replay.sglang_frontend.args import FAULT_KNOB, engine_options
from replay.sglang_frontend.model_dir import engine_model
from replay.sglang_frontend.outputs import StepOutputBuilder, Tracked

logger = logging.getLogger("golden_replay.sglang_scheduler")
FORCE_STREAM_INTERVAL = int(os.environ.get("SGLANG_FORCE_STREAM_INTERVAL", "50"))
POLL_MS = 5  # how often a deferred flush is re-checked while no message arrives
# What the engine's arithmetic does not depend on (portable math), as its own server reports it;
# SGLang merges the handshake into /server_info, where the numerics-parity check reads it.
NUMERICS_INDEPENDENT_OF = ["device", "page_size", "chunked_prefill_size"]
# Sampling settings that would change a greedy answer. `min_new_tokens` is not among them: it only
# masks stop tokens, and the engine's model has none (the OpenAI route sends `min_tokens`).
GREEDY_DEFAULTS = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
                   "min_p": 0.0}


class Rejected(ValueError):
    """A request this engine cannot serve as asked (becomes a 400 abort)."""


def _check_request(req: TokenizedGenerateReqInput) -> None:
    sp = req.sampling_params
    if sp.top_k != 1:
        raise Rejected("the embedded engine decodes greedily: temperature must be 0")
    for name, default in GREEDY_DEFAULTS.items():
        if getattr(sp, name, default) != default:
            raise Rejected(f"sampling_params.{name} is not supported by the embedded engine")
    if sp.stop_strs or sp.stop_token_ids or getattr(sp, "stop_regex_strs", None):
        raise Rejected("stop strings and stop token ids are not supported by the embedded engine")
    if req.token_ids_logprob:
        raise Rejected("token_ids_logprob is not supported by the embedded engine")
    if req.input_embeds is not None or req.mm_inputs is not None:
        raise Rejected("the embedded engine takes token ids only")
    if req.return_hidden_states:
        raise Rejected("return_hidden_states is not supported by the embedded engine")
    if sp.max_new_tokens is None or sp.max_new_tokens < 1:
        raise Rejected("max_new_tokens must be >= 1 for the embedded engine")


def _abort_reason(message: str, status_code: int | None = None) -> dict[str, Any]:
    return {"type": "abort", "message": message, "status_code": status_code,
            "err_type": "BadRequestError" if status_code == 400 else None}


class EngineScheduler:
    """SGLang's scheduler role, played by the embedded engine."""

    def __init__(self, server_args: Any, port_args: Any) -> None:
        started = time.perf_counter()
        self.server_args = server_args
        config_json = json.loads((Path(server_args.model_path) / "config.json").read_text())
        config, seed = engine_model(config_json)
        self.options = engine_options(server_args, config, seed)
        context = zmq.Context(2)
        self.recv_from_tokenizer = context.socket(zmq.PULL)
        self.recv_from_tokenizer.connect(port_args.scheduler_input_ipc_name)
        to_tokenizer = context.socket(zmq.PUSH)
        to_tokenizer.connect(port_args.tokenizer_ipc_name)
        to_detokenizer = context.socket(zmq.PUSH)  # used by the engine thread only
        to_detokenizer.connect(port_args.tokenizer_ipc_name if server_args.skip_tokenizer_init
                               else port_args.detokenizer_ipc_name)
        self.send_to_tokenizer = SenderWrapper(to_tokenizer)  # SGLang's own sender
        self.send_to_detokenizer = SenderWrapper(to_detokenizer)
        self.lock = threading.Lock()
        self.tracked: dict[Sequence, Tracked] = {}
        self.by_rid: dict[str, Tracked] = {}
        self.pending_flush: tuple[FlushCacheReqInput, float] | None = None
        built = time.perf_counter()
        self.engine = LLMEngine(self.options, on_step=self._on_step)
        self.builder = self._builder()
        # SGLang aggregates these phases over ranks (observability/startup_time.py)
        self.startup_time = {"load_weight": time.perf_counter() - built, "kv_cache_allocation": 0.0,
                             "scheduler_e2e": time.perf_counter() - started}

    def _builder(self) -> StepOutputBuilder:
        return StepOutputBuilder(
            self.engine.faults, self.options.enable_hierarchical_cache,
            STORAGE_BACKEND_CLASSES.get(self.options.hicache_storage_backend or ""),
            getattr(self.server_args, "weight_version", None) or "default")

    # -- handshake -----------------------------------------------------------------------------

    def init_info(self) -> dict[str, Any]:
        o = self.options
        config = self.engine.model.config
        if not o.enable_hierarchical_cache:
            layout = disabled_l3_layout("Hierarchical cache is disabled", page_size=o.page_size)
        else:
            layout = disabled_l3_layout("Mooncake storage is not attached",
                                        backend=o.hicache_storage_backend, page_size=o.page_size)
        return {
            "status": "ready",
            "max_total_num_tokens": o.max_total_tokens,
            "max_req_input_len": min(config.max_context, o.max_total_tokens) - 1,
            "startup_time": self.startup_time,
            "hicache_object_layout": layout,
            "numerics_independent_of": NUMERICS_INDEPENDENT_OF,
        }

    # -- the loop (main thread) ----------------------------------------------------------------

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.recv_from_tokenizer, zmq.POLLIN)
        while True:
            if poller.poll(POLL_MS if self.pending_flush else None):
                while True:
                    try:
                        message = sock_recv(self.recv_from_tokenizer, zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self.dispatch(message)
            self._check_pending_flush()

    def dispatch(self, message: Any) -> None:
        if isinstance(message, TokenizedGenerateReqInput):
            self.add(message)
        elif isinstance(message, BatchTokenizedGenerateReqInput):
            for req in message:
                self.add(req)
        elif isinstance(message, FlushCacheReqInput):
            reply = self.flush(message)
            if reply is not None:
                self.reply(reply, message)
        elif isinstance(message, GetInternalStateReq):
            self.reply(self.internal_state(), message)
        elif isinstance(message, SetInternalStateReq):
            self.reply(SetInternalStateReqOutput(updated=self.set_internal_state(message)), message)
        elif isinstance(message, AbortReq):
            self.abort(message)
        else:
            logger.debug("ignored %s", type(message).__name__)

    def reply(self, output: Any, request: Any) -> None:
        """A control answer or a rejection, routed back like the request (SGLang's send_output)."""
        self.send_to_tokenizer.send_output(output, request)

    # -- generation ----------------------------------------------------------------------------

    def add(self, req: TokenizedGenerateReqInput) -> None:
        ids = list(req.input_ids or [])
        sp = req.sampling_params
        start = req.logprob_start_len if req.return_logprob else -1
        try:
            _check_request(req)
            self.engine.check(ids, sp.max_new_tokens, start)
        except ValueError as exc:  # Rejected and the engine's own checks
            self.reply(AbortReq(rid=req.rid, finished_reason=_abort_reason(str(exc), 400)), req)
            return
        with self.lock:
            top_k = req.top_logprobs_num if req.return_logprob else 0
            seq = self.engine.submit(ids, sp.max_new_tokens, top_k, self._on_finish,
                                     logprob_start_len=start, extra_key=req.extra_key)
            tracked = Tracked(
                rid=req.rid, http_worker_ipc=req.http_worker_ipc, seq=seq,
                return_logprob=req.return_logprob, top_logprobs_num=req.top_logprobs_num,
                stream=req.stream,
                stream_interval=sp.stream_interval or self.server_args.stream_interval,
                skip_special_tokens=sp.skip_special_tokens,
                spaces_between_special_tokens=sp.spaces_between_special_tokens,
                no_stop_trim=sp.no_stop_trim)
            self.tracked[seq] = tracked
            self.by_rid[req.rid] = tracked

    def abort(self, message: AbortReq) -> None:
        """Queued requests are answered with an AbortReq now, running ones finish as aborted with
        their next step (as in SGLang). The engine cannot drop a sequence, so it still computes
        it to the end; until then it counts as running (a flush is refused, as while busy)."""
        with self.lock:
            hits = [t for rid, t in self.by_rid.items() if not t.done
                    and (message.abort_all or rid.startswith(message.rid or "\0"))]
            for tracked in hits:
                if not tracked.seq.output_ids:
                    tracked.done = True
                    self.send_to_tokenizer.send_output(AbortReq(
                        rid=tracked.rid, http_worker_ipc=tracked.http_worker_ipc,
                        finished_reason=message.finished_reason))
                else:
                    tracked.abort = message.finished_reason or _abort_reason("Aborted")

    def _forget(self, tracked: Tracked) -> None:
        self.tracked.pop(tracked.seq, None)
        self.by_rid.pop(tracked.rid, None)

    # -- engine thread -------------------------------------------------------------------------

    def _on_step(self, seqs: list[Sequence]) -> None:
        with self.lock:
            ready = []
            for seq in seqs:
                tracked = self.tracked.get(seq)
                if tracked is not None and tracked.should_output(FORCE_STREAM_INTERVAL):
                    ready.append(tracked)
            output = self.builder.build(ready)
            for seq in seqs:
                tracked = self.tracked.get(seq)
                if tracked is not None and tracked.done and seq.finished:
                    self._forget(tracked)
        if output is not None:
            self.send_to_detokenizer.send_output(output)

    def _on_finish(self, seq: Sequence) -> None:
        """An engine error fails the request like SGLang's FINISH_ABORT: a finishing chunk with the
        tokens so far and a 500 abort reason (normal finishes go out with their step)."""
        if seq.error is None:
            return
        with self.lock:
            tracked = self.tracked.get(seq)
            if tracked is None:
                return
            self._forget(tracked)
            if tracked.done:
                return  # aborted before: the tokenizer already has its answer
            tracked.abort = _abort_reason(seq.error, 500)
            output = self.builder.build([tracked])
        self.send_to_detokenizer.send_output(output)

    # -- control -------------------------------------------------------------------------------

    def _try_flush(self) -> bool:
        try:
            self.engine.request_flush().result()
            return True
        except EngineBusy:
            return False

    def flush(self, message: FlushCacheReqInput) -> FlushCacheReqOutput | None:
        if self.pending_flush is not None:
            return FlushCacheReqOutput(success=False,
                                       message="Another flush_cache is already in progress.")
        timeout = float(message.timeout_s or 0.0)
        if timeout <= 0.0 or self._idle():
            return FlushCacheReqOutput(success=self._try_flush())
        self.pending_flush = (message, time.monotonic() + timeout)
        return None

    def _idle(self) -> bool:
        with self.lock:
            return not self.tracked

    def _check_pending_flush(self) -> None:
        if self.pending_flush is None:
            return
        message, deadline = self.pending_flush
        if self._idle():
            self.pending_flush = None
            self.reply(FlushCacheReqOutput(success=self._try_flush()), message)
        elif time.monotonic() >= deadline:
            self.pending_flush = None
            self.reply(FlushCacheReqOutput(success=False,
                                           message="Timed out waiting for idle state."), message)

    def internal_state(self) -> GetInternalStateReqOutput:
        state = dict(self.server_args.resolved_dict())
        state.update(startup_time=self.startup_time["scheduler_e2e"],
                     effective_max_running_requests_per_dp=self.options.max_running_requests,
                     engine_fault=self.options.fault)
        state.pop("custom_sigquit_handler", None)
        return GetInternalStateReqOutput(internal_state=msgspec_to_builtins(state))

    def set_internal_state(self, message: SetInternalStateReq) -> bool:
        """The `engine_fault:<name>` knob (module docstring); False for anything else."""
        knobs = list(message.server_args)
        one = knobs[0] if len(knobs) == 1 and knobs[0].startswith(FAULT_KNOB) else None
        fault = one.removeprefix(FAULT_KNOB) if one else None
        if fault is None or (fault != "none" and fault not in FAULTS):
            logger.warning("/set_internal_state: only %s<fault>|none is supported, got %s", FAULT_KNOB, knobs)
            return False
        if self.pending_flush is not None or not self._idle():
            logger.warning("/set_internal_state: the engine is busy; the fault stays %s", self.options.fault)
            return False
        model = self.engine.model
        self.engine.flush_cache()  # the storage tier outlives its engine: empty it too
        self.engine.close()
        self.options = replace(self.options, fault=None if fault == "none" else fault)
        self.engine = LLMEngine(self.options, model=model, on_step=self._on_step)
        self.builder = self._builder()
        logger.info("engine fault now %s, every cache tier empty", self.options.fault)
        return True

    def close(self) -> None:
        self.engine.close()


def _exit_with_parent(parent: psutil.Process) -> None:
    while parent.is_running():
        time.sleep(1.0)
    os._exit(0)


def run_scheduler_process(server_args: Any, port_args: Any, gpu_id: int, tp_rank: int,
                          pp_rank: int, dp_rank: int | None, pipe_writer: Any, *_: Any) -> None:
    """SGLang's scheduler entry point, with the embedded engine behind it."""
    logging.basicConfig(level=getattr(logging, str(server_args.log_level).upper(), logging.INFO),
                        format="[%(asctime)s golden-replay scheduler] %(message)s")
    parent = psutil.Process().parent()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    import torch

    torch.set_num_threads(1)
    scheduler = None
    try:
        scheduler = EngineScheduler(server_args, port_args)
        pipe_writer.send(scheduler.init_info())
        scheduler.run()
    except Exception:
        logger.exception("the embedded engine scheduler failed")
        parent.send_signal(signal.SIGQUIT)
    finally:
        if scheduler is not None:
            scheduler.close()
