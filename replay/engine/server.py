"""SGLang's HTTP protocol in front of the engine (aiohttp), in-process or blocking.

Only what /work/shared/sglang-protocol.md describes, and strictly: a field SGLang would accept
but this engine cannot honour (sampling, prompt logprobs, text) is a 400 naming it, never
silently ignored, because a golden recorded under a misunderstood request is worthless.
"""

from __future__ import annotations

import asyncio
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
from replay.engine.sequence import Sequence

REQUEST_KEYS = ("input_ids", "sampling_params", "return_logprob", "logprob_start_len",
                "top_logprobs_num", "return_text_in_logprobs")
SAMPLING_KEYS = ("temperature", "max_new_tokens", "ignore_eos")
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default


class BadRequest(ValueError):
    pass


@dataclass(frozen=True)
class GenerateArgs:
    input_ids: list[int]
    max_new_tokens: int
    return_logprob: bool
    top_logprobs_num: int


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(_is_int(t) for t in value):
        raise BadRequest(f"{where} must be a non-empty list of token ids")
    return value


def _per_request(body: dict[str, Any], key: str, n: int, batched: bool, default: Any) -> list[Any]:
    value = body.get(key, default)
    if batched and isinstance(value, list):
        if len(value) != n:
            raise BadRequest(f"{key} has {len(value)} entries for {n} requests")
        return value
    return [value] * n


def _sampling(params: Any) -> int:
    """Validate one sampling_params dict; returns max_new_tokens."""
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise BadRequest("sampling_params must be an object")
    unknown = sorted(set(params) - set(SAMPLING_KEYS))
    if unknown:
        raise BadRequest(f"unsupported sampling_params {', '.join(unknown)} "
                         f"(the embedded engine takes {', '.join(SAMPLING_KEYS)})")
    temperature = params.get("temperature", 0)
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or temperature:
        raise BadRequest("temperature must be 0: the embedded engine decodes greedily")
    if not isinstance(params.get("ignore_eos", True), bool):
        raise BadRequest("ignore_eos must be a boolean")
    max_new = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if not _is_int(max_new) or max_new < 1:
        raise BadRequest("max_new_tokens must be an integer >= 1")
    return max_new


def parse_generate(body: Any) -> tuple[list[GenerateArgs], bool]:
    """The requests in a /generate body and whether it was batched; BadRequest if invalid."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    unknown = sorted(set(body) - set(REQUEST_KEYS))
    if unknown:
        raise BadRequest(f"unexpected field(s) {', '.join(unknown)} "
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
    if not isinstance(body.get("return_text_in_logprobs", False), bool):
        raise BadRequest("return_text_in_logprobs must be a boolean")
    requests = []
    for i in range(n):
        if not isinstance(want_logprob[i], bool):
            raise BadRequest("return_logprob must be a boolean")
        if start_len[i] != -1 or isinstance(start_len[i], bool):
            raise BadRequest("logprob_start_len must be -1: prompt logprobs are not supported "
                             "(they would force recomputing the prompt and defeat the cache)")
        if not _is_int(top_num[i]) or top_num[i] < 0:
            raise BadRequest("top_logprobs_num must be an integer >= 0")
        requests.append(GenerateArgs(prompts[i], _sampling(sampling[i]), want_logprob[i],
                                     top_num[i]))
    return requests, batched


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


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
                               resolver(future))
        return list(await asyncio.gather(*futures))

    async def generate(self, request: web.Request) -> web.Response:
        received = time.monotonic()
        try:
            requests, batched = parse_generate(await request.json())
            for args in requests:
                self.engine.check(args.input_ids, args.max_new_tokens)
        except ValueError as exc:  # BadRequest, the engine's checks, and bad JSON
            return _error(400, str(exc))
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
        options = self.engine.options
        tiers = seq.cached or CachedTokens()
        cached = self.engine.faults.reported_cached(tiers.total, seq.prompt_len)
        meta: dict[str, Any] = {
            "id": seq.rid,
            "finish_reason": {"type": "length", "length": seq.max_new_tokens},
            "prompt_tokens": seq.prompt_len,
            "completion_tokens": len(seq.output_ids),
            "cached_tokens": cached,
        }
        if options.enable_hierarchical_cache:
            details: dict[str, Any] = {"device": tiers.device, "host": tiers.host,
                                       "storage": tiers.storage}
            if options.hicache_storage_backend:
                details["storage_backend"] = options.hicache_storage_backend
            meta["cached_tokens_details"] = details
        if args.return_logprob:
            meta["output_token_logprobs"] = [
                [lp, tok, None] for lp, tok in zip(seq.output_logprobs, seq.output_ids)]
            if args.top_logprobs_num > 0:
                meta["output_top_logprobs"] = [
                    [[lp, tok, None] for tok, lp in zip(ids, lps)] for ids, lps in seq.output_top]
        meta["e2e_latency"] = latency
        return {"text": "", "output_ids": list(seq.output_ids), "meta_info": meta}

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
            "weight_version": "default",
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
    """Serve until SIGINT or SIGTERM, then stop cleanly (the main thread must call this)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with start_server(options, launch_command=launch_command or " ".join(sys.argv)) as server:
            model = server.engine.model
            print(f"golden-replay engine: serving {model.model_path} at {server.url}",
                  file=sys.stderr, flush=True)
            while not stop.wait(0.5):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
