"""SGLang's HTTP protocol in front of the engine (aiohttp), in-process or blocking.

Only what /work/shared/sglang-protocol.md describes, and strictly: a field SGLang would accept
but this engine cannot honour (text, streaming, penalties, stop strings) is a 400 naming it, never
silently ignored, because a golden recorded under a misunderstood request is worthless. Fields
SGLang itself does not know are ignored, as SGLang does. Responses carry SGLang 0.5.23's keys
and shapes (TokenizerManager's meta_info), so clients tested here meet the real shapes; a bad
request gets SGLang's contract-gate answer, 400 {"error": "<text>"}.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from aiohttp import web

from replay.engine.engine import VERSION, EngineBusy, LLMEngine
from replay.engine.model import HybridModel
from replay.engine.options import EngineOptions
from replay.engine.radix_cache import CachedTokens
from replay.engine.sampling import GREEDY, SamplingParams
from replay.engine.sequence import Sequence
from replay.engine.top_logprobs import output_top_fields

# /generate fields this engine honours; SGLang 0.5.23's other GenerateRequest fields are refused
# unless they hold their default; fields SGLang does not know are ignored, as SGLang does.
REQUEST_KEYS = ("input_ids", "sampling_params", "return_logprob", "logprob_start_len",
                "top_logprobs_num", "return_text_in_logprobs", "extra_key",
                "return_flat_raw_output_top_logprobs", "return_flat_raw_top_logprobs_b64")
SGLANG_REQUEST_KEYS = frozenset((
    "rid", "text", "input_ids", "stream", "sampling_params", "return_logprob",
    "logprob_start_len", "top_logprobs_num", "token_ids_logprob", "return_hidden_states",
    "return_text_in_logprobs", "bootstrap_host", "bootstrap_port", "bootstrap_room",
    "bootstrap_pair_key", "decode_tp_size", "routed_dp_rank", "disagg_prefill_dp_rank",
    "image_data", "mm_hashes", "video_data", "audio_data", "extra_key", "priority", "cache_salt",
    "require_reasoning", "lora_path", "session_params", "kv_hints", "routing_key",
    "max_thinking_tokens", "session_id", "custom_logit_processor", "custom_labels",
    "images_config", "return_prompt_token_ids", "routed_experts_start_len",
    "return_sampling_mask", "modalities"))
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "sampling_seed", "max_new_tokens",
                 "ignore_eos")
# Sampling fields accepted only at the value that changes nothing (e.g. a client that always
# sends explicit neutral penalties).
NEUTRAL_SAMPLING = {"frequency_penalty": 0, "presence_penalty": 0, "repetition_penalty": 1,
                    "min_new_tokens": 0, "n": 1}
SGLANG_SAMPLING_KEYS = frozenset((
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
    "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "no_stop_trim", "stream_interval", "logit_bias",
    "sampling_seed", "custom_params", "beam_width", "watermark", "choice"))
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default
WEIGHT_VERSION = "default"  # SGLang's default --weight-version
STORAGE_BACKEND_CLASSES = {"file": "HiCacheFile"}  # the class name SGLang reports


class BadRequest(ValueError):
    pass


@dataclass(frozen=True)
class GenerateArgs:
    input_ids: list[int]
    max_new_tokens: int
    return_logprob: bool
    top_logprobs_num: int
    sampling: SamplingParams = GREEDY
    logprob_start_len: int = -1  # -1 unless return_logprob asks for prompt logprobs
    flat_top: bool = False  # return_flat_raw_output_top_logprobs
    flat_b64: bool = False  # return_flat_raw_top_logprobs_b64
    extra_key: str | None = None  # SGLang's extra cache key: reuse only between equal keys


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _token_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(_is_int(t) for t in value):
        raise BadRequest(f"{where} must be a non-empty list of token ids")
    return value


def _per_request(body: dict[str, Any], key: str, n: int, batched: bool, default: Any) -> list[Any]:
    value = body.get(key)
    if value is None:
        value = default
    if batched and isinstance(value, list):
        if len(value) != n:
            raise BadRequest(f"{key} has {len(value)} entries for {n} requests")
        return [default if v is None else v for v in value]
    return [value] * n


def _number(params: dict[str, Any], key: str, default: float) -> float:
    value = params.get(key)
    if value is None:
        return default
    if not _is_number(value):
        raise BadRequest(f"sampling_params.{key} must be a number")
    return float(value)


def _integer(params: dict[str, Any], key: str, default: int | None) -> int | None:
    value = params.get(key)
    if value is None:
        return default
    if not _is_int(value):
        raise BadRequest(f"sampling_params.{key} must be an integer")
    return value


def _sampling(params: Any) -> tuple[SamplingParams, int]:
    """Validate one sampling_params dict; returns the sampling fields and max_new_tokens."""
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise BadRequest("sampling_params must be an object")
    unknown = sorted(set(params) - SGLANG_SAMPLING_KEYS)
    if unknown:
        raise BadRequest(f"unknown field `{unknown[0]}` in sampling_params")
    for key in sorted(set(params) - set(SAMPLING_KEYS)):
        value = params[key]
        if value is None or (key in NEUTRAL_SAMPLING and _is_number(value)
                             and value == NEUTRAL_SAMPLING[key]):
            continue
        raise BadRequest(f"unsupported sampling_params {key} (the embedded engine takes "
                         f"{', '.join(SAMPLING_KEYS)}, and {', '.join(NEUTRAL_SAMPLING)} at their "
                         "neutral values)")
    if not isinstance(params.get("ignore_eos", True), (bool, type(None))):
        raise BadRequest("ignore_eos must be a boolean")
    max_new = _integer(params, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if max_new < 0:
        raise BadRequest("max_new_tokens must be an integer >= 0")
    try:
        sampling = SamplingParams(
            temperature=_number(params, "temperature", 1.0),
            top_p=_number(params, "top_p", 1.0),
            top_k=_integer(params, "top_k", -1),
            min_p=_number(params, "min_p", 0.0),
            sampling_seed=_integer(params, "sampling_seed", None),
        )
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return sampling, max_new


def parse_generate(body: Any) -> tuple[list[GenerateArgs], bool]:
    """The requests in a /generate body and whether it was batched; BadRequest if invalid."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    unsupported = sorted(k for k in set(body) & SGLANG_REQUEST_KEYS - set(REQUEST_KEYS)
                         if body[k] not in (None, False, [], {}))
    if unsupported:
        raise BadRequest(f"unsupported field(s) {', '.join(unsupported)} "
                         f"(the embedded engine takes {', '.join(REQUEST_KEYS)})")
    ids = body.get("input_ids")
    batched = isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)
    prompts = ([_token_list(p, f"input_ids[{i}]") for i, p in enumerate(ids)] if batched
               else [_token_list(ids, "input_ids")])
    n = len(prompts)
    sampling = _per_request(body, "sampling_params", n, batched, None)
    want_logprob = _per_request(body, "return_logprob", n, batched, False)
    start_len = _per_request(body, "logprob_start_len", n, batched, -1)
    top_num = _per_request(body, "top_logprobs_num", n, batched, 0)
    extra_keys = _per_request(body, "extra_key", n, batched, None)
    for key in ("return_text_in_logprobs", "return_flat_raw_output_top_logprobs",
                "return_flat_raw_top_logprobs_b64"):
        if not isinstance(body.get(key, False), (bool, type(None))):
            raise BadRequest(f"{key} must be a boolean")
    flat = bool(body.get("return_flat_raw_output_top_logprobs"))
    flat_b64 = bool(body.get("return_flat_raw_top_logprobs_b64"))
    if flat_b64 and not flat:  # SGLang's own rule (io_struct.py)
        raise BadRequest("return_flat_raw_top_logprobs_b64 requires "
                         "return_flat_raw_output_top_logprobs")
    requests = []
    for i in range(n):
        if not isinstance(want_logprob[i], bool):
            raise BadRequest("return_logprob must be a boolean")
        if not _is_int(start_len[i]) or start_len[i] < -1:
            raise BadRequest("logprob_start_len must be an integer >= -1")
        if not _is_int(top_num[i]) or top_num[i] < 0:
            raise BadRequest("top_logprobs_num must be an integer >= 0")
        if extra_keys[i] is not None and not isinstance(extra_keys[i], str):
            raise BadRequest("extra_key must be a string")
        params, max_new = _sampling(sampling[i])
        requests.append(GenerateArgs(prompts[i], max_new, want_logprob[i], top_num[i], params,
                                     start_len[i] if want_logprob[i] else -1, flat, flat_b64,
                                     extra_keys[i]))
    return requests, batched


def _contract_error(message: str) -> web.Response:
    """SGLang's request contract gate answers a bad body with 400 {"error": "<text>"}."""
    return web.json_response({"error": message}, status=400)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


def _entries(values: list[float | None], ids: list[int]) -> list[list[Any]]:
    return [[lp, tok, None] for lp, tok in zip(values, ids)]


def _top_rows(rows: list[tuple[list[int], list[float]]]) -> list[list[list[Any]]]:
    return [[[lp, tok, None] for tok, lp in zip(ids, lps)] for ids, lps in rows]


class EngineApp:
    """The aiohttp handlers around one engine."""

    def __init__(self, engine: LLMEngine, launch_command: str) -> None:
        self.engine = engine
        self.launch_command = launch_command

    def build(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        r = app.router
        r.add_post("/generate", self.generate)
        for path in ("/flush_cache",):
            r.add_get(path, self.flush_cache)
            r.add_post(path, self.flush_cache)
        for path in ("/server_info", "/get_server_info"):
            r.add_get(path, self.server_info)
        for path in ("/model_info", "/get_model_info"):
            r.add_get(path, self.model_info)
        r.add_get("/health", self.health)
        r.add_get("/health_generate", self.health_generate)
        r.add_get("/hicache/storage-backend", self.storage_backend)
        r.add_post("/hicache/storage-backend/clear", self.clear_storage)
        return app

    async def _run(self, requests: list[GenerateArgs]) -> list[Sequence]:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in requests]

        def resolver(future: asyncio.Future):  # called on the engine thread
            def resolve(seq: Sequence) -> None:
                try:
                    loop.call_soon_threadsafe(lambda: future.done() or future.set_result(seq))
                except RuntimeError:  # the server's loop is already closed
                    pass
            return resolve

        for args, future in zip(requests, futures):
            self.engine.submit(args.input_ids, args.max_new_tokens, args.top_logprobs_num,
                               resolver(future), sampling=args.sampling,
                               logprob_start_len=args.logprob_start_len,
                               extra_key=args.extra_key)
        return list(await asyncio.gather(*futures))

    async def generate(self, request: web.Request) -> web.Response:
        received = time.monotonic()
        try:
            requests, batched = parse_generate(await request.json())
            for args in requests:
                self.engine.check(args.input_ids, args.max_new_tokens, args.logprob_start_len)
        except ValueError as exc:  # BadRequest, the engine's checks, and bad JSON
            return _contract_error(str(exc))
        try:
            seqs = await self._run(requests)
        except RuntimeError as exc:  # shutting down: nothing was run
            return _error(503, str(exc))
        failed = [s.error for s in seqs if s.error]
        if failed:
            return _error(500, failed[0])
        latency = time.monotonic() - received
        outputs = [self._response(s, a, latency) for s, a in zip(seqs, requests)]
        return web.json_response(outputs if batched else outputs[0])

    def _response(self, seq: Sequence, args: GenerateArgs, latency: float) -> dict[str, Any]:
        """SGLang 0.5.23's response, key for key (TokenizerManager's meta_info)."""
        n = len(seq.output_ids)
        tiers = seq.cached or CachedTokens()
        meta: dict[str, Any] = {
            "id": seq.rid,
            "finish_reason": {"type": "length", "length": seq.max_new_tokens},
            "prompt_tokens": seq.prompt_len,
            "weight_version": WEIGHT_VERSION,
            "num_retractions": seq.num_retractions,  # 0 unless test_retract_interval forces it
        }
        if args.return_logprob:
            meta["input_token_logprobs"] = self._input_logprobs(seq)
            meta["output_token_logprobs"] = _entries(seq.output_logprobs, seq.output_ids)
            meta["output_token_logprobs_length"] = n
            if args.top_logprobs_num > 0:
                meta["input_top_logprobs"] = ([None] + _top_rows(seq.input_top)
                                              if seq.wants_prompt_logprobs else [])
                meta.update(output_top_fields(seq.output_top, args.top_logprobs_num,
                                              flat=args.flat_top, b64=args.flat_b64))
        meta["reasoning_tokens"] = 0
        meta["completion_tokens"] = n
        meta["cached_tokens"] = self.engine.faults.reported_cached(tiers.total, seq.prompt_len)
        meta["weight_versions"] = [{"version": WEIGHT_VERSION, "start": 0, "end": n}]
        meta["cached_tokens_details"] = self._cached_details(tiers)
        meta["e2e_latency"] = latency
        meta["response_sent_to_client_ts"] = time.time()
        return {"text": "", "output_ids": list(seq.output_ids), "meta_info": meta}

    @staticmethod
    def _input_logprobs(seq: Sequence) -> list[list[Any]]:
        """[None, id, None] for the first position (nothing before it was scored), then one
        entry per prompt token after logprob_start_len; [] without prompt logprobs."""
        if not seq.wants_prompt_logprobs:
            return []
        return _entries([None] + seq.input_logprobs, seq.input_ids[seq.logprob_start_len:])

    def _cached_details(self, cached: CachedTokens) -> dict[str, Any] | None:
        """None when nothing was cached, else the tiers (storage once a backend is attached)."""
        if cached.total == 0:
            return None
        details: dict[str, Any] = {"device": cached.device, "host": cached.host}
        if self.engine.options.hicache_storage_backend or cached.storage:
            details["storage"] = cached.storage
        if self.engine.options.hicache_storage_backend:
            details["storage_backend"] = STORAGE_BACKEND_CLASSES[
                self.engine.options.hicache_storage_backend]
        return details

    async def flush_cache(self, request: web.Request) -> web.Response:
        try:
            timeout = float(request.query.get("timeout", 0))
        except ValueError:
            return web.Response(status=400, text="timeout must be a number of seconds")
        deadline = time.monotonic() + timeout
        while True:
            try:
                await asyncio.wrap_future(self.engine.request_flush())
                return web.Response(text="Cache flushed.\n")
            except EngineBusy as exc:
                if time.monotonic() >= deadline:
                    return web.Response(status=400, text=f"{exc}\n")
            await asyncio.sleep(0.05)

    def server_info_dict(self) -> dict[str, Any]:
        model = self.engine.model
        info = self.engine.options.server_args()
        info.update(
            model_path=model.model_path,
            enable_deterministic_inference=True,
            # Exact by construction (portable-math.md): the same bits on any device, page size
            # and prefill chunking, so a numerics-parity check must not hold these against it.
            numerics_independent_of=["device", "page_size", "chunked_prefill_size"],
            vocab_size=model.config.vocab_size,
            version=VERSION,
            launch_command=self.launch_command,
            internal_states=[],
        )
        return info

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response(self.server_info_dict())

    async def model_info(self, request: web.Request) -> web.Response:
        model = self.engine.model
        return web.json_response({
            "model_path": model.model_path,
            "served_model_name": model.model_path,
            "tokenizer_path": None,
            "weight_version": WEIGHT_VERSION,
            "load_format": "embedded",
            "model_type": "hybrid",
            "architectures": ["GoldenHybridForCausalLM"],
            "vocab_size": model.config.vocab_size,
            "is_generation": True,
        })

    async def health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def health_generate(self, request: web.Request) -> web.Response:
        seq = (await self._run([GenerateArgs([0], 1, False, 0)]))[0]
        if seq.error:
            return web.Response(status=503, text=seq.error)
        return web.Response()

    async def clear_storage(self, request: web.Request) -> web.Response:
        """POST /hicache/storage-backend/clear. Here L3 pages hang off the radix tree (no lookup
        by hash), so a flush already empties the tier: clearing is a flush, refused while busy."""
        if not self.engine.options.hicache_storage_backend:
            return web.Response(status=400, text="no storage backend is attached\n")
        try:
            await asyncio.wrap_future(self.engine.request_flush())
        except EngineBusy as exc:
            return web.Response(status=400, text=f"{exc}\n")
        return web.Response(text="Hierarchical cache storage backend cleared.\n")

    async def storage_backend(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"hicache_storage_backend": self.engine.options.hicache_storage_backend})


class RunningServer:
    """An engine and its HTTP app on a private event loop in a background thread.
    `stop()` (or leaving the `with` block) ends both and joins every thread they started."""

    def __init__(self, options: EngineOptions, model: HybridModel | None = None,
                 launch_command: str = "replay.engine.server.start_server") -> None:
        self.engine = LLMEngine(options, model)
        self._app = EngineApp(self.engine, launch_command)
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.url = ""
        self._thread = threading.Thread(target=self._serve, name="engine-http", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self.engine.close()
            raise self._error

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as exc:  # e.g. the port is taken
            self._error = exc
            self._ready.set()
            self._loop.close()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    async def _start(self) -> None:
        options = self.engine.options
        self._runner = web.AppRunner(self._app.build(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, options.host, options.port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self.engine.close()  # pending requests get "engine stopped"
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def __enter__(self) -> "RunningServer":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def start_server(options: EngineOptions, model: HybridModel | None = None,
                 launch_command: str = "replay.engine.server.start_server") -> RunningServer:
    """Start an engine server in this process (port 0 in options: any free port)."""
    return RunningServer(options, model, launch_command)


def serve(options: EngineOptions, launch_command: str | None = None) -> None:
    """Serve until SIGINT, SIGTERM, SIGHUP or the parent process's death, then stop cleanly
    (the main thread must call this). The engine is one process: nothing outlives it."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    parent = os.getppid()
    try:
        with start_server(options, launch_command=launch_command or " ".join(sys.argv)) as server:
            model = server.engine.model
            print(f"golden-replay engine: serving {model.model_path} at {server.url}",
                  file=sys.stderr, flush=True)
            while not stop.wait(0.5) and os.getppid() == parent:
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
