"""SGLang's HTTP protocol in front of the engine (aiohttp), in-process or blocking.

Only what SGLang's protocol describes, and strictly: what a /generate body may hold is checked in
replay/engine/generate_request.py (a field this engine cannot honour is a 400 naming it, never
silently ignored). Responses carry SGLang 0.5.23's keys and shapes (TokenizerManager's
meta_info), so clients tested here meet the real shapes; a bad request gets SGLang's
contract-gate answer, 400 {"error": "<text>"}.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from types import TracebackType
from typing import Any

from aiohttp import web

from replay.engine.engine import VERSION, EngineBusy, LLMEngine
from replay.engine.generate_request import GenerateArgs, parse_generate
from replay.engine.model import HybridModel
from replay.engine.options import EngineOptions
from replay.engine.radix_nodes import CachedTokens
from replay.engine.sequence import Sequence
from replay.engine.top_logprobs import output_top_fields

WEIGHT_VERSION = "default"  # SGLang's default --weight-version
STORAGE_BACKEND_CLASSES = {"file": "HiCacheFile"}  # the class name SGLang reports


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
