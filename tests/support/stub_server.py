"""A deterministic in-process SGLang-protocol stub for client tests (never shipped to users).

Outputs are a pure function of the tokens before each position, so a replay reproduces a
recording exactly; a radix-like table of previously seen sequences gives honest `cached_tokens`
(rounded down to the page size). `tamper(n, input_ids, response)` lets a test change the n-th
response (0-based over /generate requests), and `fail_status` forces an HTTP error.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import web

Tamper = Callable[[int, list[int], dict[str, Any]], dict[str, Any]]


@dataclass
class StubConfig:
    vocab_size: int = 4096
    page_size: int = 16
    radix: bool = True  # report cache hits
    model_path: str = "stub/model@0"
    tamper: Tamper | None = None
    fail_status: int | None = None  # every /generate answers this status
    raw_body: str | None = None  # every /generate answers this text verbatim
    extra_server_info: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0  # seconds before each /generate answer
    statuses: list[int] = field(default_factory=list)  # answer these first, one per request
    flush_busy: int = 0  # /flush_cache answers 400 this many times first
    reset: bool = False  # close the connection in the middle of every /generate body
    extra_model_info: dict[str, Any] = field(default_factory=dict)
    auth_status: int | None = None  # every endpoint answers this status (e.g. 401)
    retractions: int = 0  # num_retractions reported for every /generate answer
    raw_bytes: bytes | None = None  # every /generate answers these bytes verbatim
    raw_encoding: str | None = None  # ... with this Content-Encoding (e.g. gzip)
    redirect: str | None = None  # every /generate answers 307 to this location
    endless: bool = False  # every /generate streams a body that never ends
    state_vocab: bool = True  # /server_info and /model_info name vocab_size
    echo_auth: int | None = None  # every /generate answers this status, echoing Authorization
    # SGLang 0.5.17-0.5.21's refusal: the b64 flag without return_flat_raw_top_logprobs is a 400
    refuse_b64_alone: bool = False
    # SGLang 0.5.17-0.5.23's report of prompt ids: the vocabulary's last id comes back as 0
    clip_last_id: bool = False
    port: int = 0  # 0: any free port (a launched stub is given its port)


def next_token(context: list[int], vocab: int) -> tuple[int, float, list[tuple[int, float]]]:
    """Greedy token, its logprob (a float32 value) and a top list with a tie at the last rank."""
    h = 1469598103934665603
    for t in context[-8:]:
        h = ((h ^ t) * 1099511628211) & 0xFFFFFFFFFFFF
    h = (h ^ len(context)) & 0xFFFFFFFFFFFF
    tok = int(h % vocab)
    lp = float(np.float32(-((h >> 12) % 4000) / 997.0 - 0.01))
    alts = [(tok, lp)]
    for j in range(1, 6):
        alts.append(((tok + 7 * j) % vocab, float(np.float32(lp - 0.5 * j))))
    alts[5] = ((tok + 35) % vocab, alts[4][1])  # ranks 4 and 5 tie
    return tok, lp, alts


class StubServer:
    def __init__(self, config: StubConfig | None = None) -> None:
        self.config = config or StubConfig()
        self.requests = 0
        self.seen: list[tuple[int, ...]] = []
        self.auth_headers: list[str | None] = []
        self.flush_queries: list[str] = []
        self.bodies: list[dict[str, Any]] = []  # every /generate body, as sent
        self.storage_clears: list[str | None] = []  # the Authorization header of each clear
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def _cached(self, ids: list[int]) -> int:
        best = 0
        for s in self.seen:
            n = 0
            for a, b in zip(s, ids):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        best = min(best, len(ids) - 1)
        return best // self.config.page_size * self.config.page_size

    def prompt_logprobs(self, ids: list[int], start: int) -> list[list[Any]]:
        """`input_token_logprobs` from `start`: the first unscored, then each token's logprob
        under the stub's next-token rule (its own logprob when greedy, else a fixed value)."""
        entries: list[list[Any]] = []
        last = self.config.vocab_size - 1
        for j in range(start, len(ids)):
            shown = 0 if self.config.clip_last_id and ids[j] >= last else ids[j]
            if j == start:
                entries.append([None, shown, None])
                continue
            tok, lp, _ = next_token(ids[:j], self.config.vocab_size)
            entries.append([lp if tok == ids[j] else -20.0, shown, None])
        return entries

    def complete(self, ids: list[int], max_new: int, k: int) -> dict[str, Any]:
        cached = self._cached(ids) if self.config.radix else 0
        context = list(ids)
        out, lps, tops = [], [], []
        for _ in range(max_new):
            tok, lp, alts = next_token(context, self.config.vocab_size)
            out.append(tok)
            lps.append([lp, tok, None])
            tops.append([[v, t, None] for t, v in alts[:k]])
            context.append(tok)
        if self.config.radix:
            self.seen.append(tuple(context[:-1]))
        return {
            "text": "", "output_ids": out,
            "meta_info": {
                "id": f"stub-{self.requests}", "finish_reason": {"type": "length", "length": max_new},
                "prompt_tokens": len(ids), "completion_tokens": max_new, "cached_tokens": cached,
                "num_retractions": self.config.retractions,
                "cached_tokens_details": {"device": cached, "host": 0},
                "output_token_logprobs": lps, "output_top_logprobs": tops if k else None,
                "e2e_latency": 0.0,
            },
        }

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        self.auth_headers.append(request.headers.get("Authorization"))
        if self.config.refuse_b64_alone and body.get("return_flat_raw_top_logprobs_b64") \
                and not body.get("return_flat_raw_top_logprobs"):
            return web.json_response({"error": {"message": "return_flat_raw_top_logprobs_b64 "
                                                "requires return_flat_raw_top_logprobs."}},
                                     status=400)
        if self.config.statuses:
            return web.Response(status=self.config.statuses.pop(0), text="busy")
        if self.config.reset:
            resp = web.StreamResponse(headers={"Content-Length": "100000"})
            await resp.prepare(request)
            await resp.write(b'{"text": "", "output_ids": [1, 2')
            request.transport.close()
            return resp
        if self.config.echo_auth:
            auth = request.headers.get("Authorization") or ""
            return web.Response(status=self.config.echo_auth,
                                text=f"rejected {auth}; key was {auth.split()[-1] if auth else ''}")
        if self.config.redirect:
            raise web.HTTPTemporaryRedirect(self.config.redirect)
        if self.config.raw_bytes is not None:
            headers = {"Content-Encoding": self.config.raw_encoding} if self.config.raw_encoding else {}
            return web.Response(body=self.config.raw_bytes, content_type="application/json",
                                headers=headers)
        if self.config.endless:
            resp = web.StreamResponse()
            await resp.prepare(request)
            await resp.write(b'{"text": "')
            while True:
                await resp.write(b"x" * 65536)
        if self.config.fail_status:
            return web.Response(status=self.config.fail_status, text="stub failure")
        if self.config.raw_body is not None:
            return web.Response(text=self.config.raw_body, content_type="application/json")
        if self.config.delay:
            await asyncio.sleep(self.config.delay)
        n = self.requests
        self.requests += 1
        ids = body["input_ids"]
        sp = body["sampling_params"]
        resp = self.complete(ids, sp["max_new_tokens"], body.get("top_logprobs_num", 0))
        start = body.get("logprob_start_len", -1)
        if start >= 0:  # prompt logprobs from `start`; SGLang reuses at most `start` tokens
            resp["meta_info"]["input_token_logprobs"] = self.prompt_logprobs(ids, start)
            resp["meta_info"]["cached_tokens"] = min(resp["meta_info"]["cached_tokens"], start)
        if self.config.tamper:
            resp = self.config.tamper(n, ids, resp)
        return web.json_response(resp)

    async def _server_info(self, request: web.Request) -> web.Response:
        info = {"model_path": self.config.model_path, "page_size": self.config.page_size,
                "disable_radix_cache": not self.config.radix, "vocab_size": self.config.vocab_size,
                **self.config.extra_server_info}
        if not self.config.state_vocab:
            info.pop("vocab_size")
        return web.json_response(info)

    async def _model_info(self, request: web.Request) -> web.Response:
        info = {"model_path": self.config.model_path, "vocab_size": self.config.vocab_size,
                **self.config.extra_model_info}
        if not self.config.state_vocab:
            info.pop("vocab_size")
        return web.json_response(info)

    async def _clear_storage(self, request: web.Request) -> web.Response:
        self.storage_clears.append(request.headers.get("Authorization"))
        return web.Response(text="Hierarchical cache storage backend cleared.\n")

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.config.auth_status is not None:
            return web.json_response({"error": "unauthorized"}, status=self.config.auth_status)
        return await handler(request)

    async def _flush(self, request: web.Request) -> web.Response:
        self.flush_queries.append(request.query_string)
        if self.config.flush_busy > 0:
            self.config.flush_busy -= 1
            return web.Response(status=400, text="requests still running")
        self.seen.clear()
        return web.Response(text="ok")

    def start(self) -> "StubServer":
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application(middlewares=[self._auth])
            app.router.add_post("/generate", self._generate)
            app.router.add_post("/hicache/storage-backend/clear", self._clear_storage)
            app.router.add_get("/server_info", self._server_info)
            app.router.add_get("/model_info", self._model_info)
            app.router.add_route("*", "/flush_cache", self._flush)
            self._runner = web.AppRunner(app)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", self.config.port)
            loop.run_until_complete(site.start())
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.url = f"http://127.0.0.1:{port}"
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop and self._thread:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> "StubServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
