"""A connection: the transport (`ServerClient`) and the API adapter that speaks over it.

The one place where a client is opened and its adapter chosen (`connect`), so every entry point
(record, replay, matrix, update, demo, the pytest plugin, the detection matrix) talks to every
API the same way. The transport never learns the adapter; the adapter gets the transport as an
argument for each call.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay.server.apis import resolve_api
from replay.server.apis.base import (NO_EXTRAS, Api, Completion, RequestExtras,
                                      SupportsFastParse, SupportsHitSources, SupportsPrepare,
                                      SupportsRequestExtras, SupportsResend, SupportsStorageClear,
                                      checked_counts)
from replay.server.jsonio import decode
from replay.server.transport import ClientOptions, ServerClient
from replay.utils.errors import MalformedResponse, RefusedRequest, UsageError


@dataclass
class Connection:
    client: ServerClient
    api: Api

    @property
    def url(self) -> str:
        return self.client.url

    @property
    def in_flight(self) -> int:
        """How many requests the client lets be in flight at once (`--concurrency`)."""
        return self.client.options.concurrency

    async def server_info(self) -> dict[str, Any]:
        return await self.api.server_info(self.client)

    async def model_info(self) -> dict[str, Any]:
        return await self.api.model_info(self.client)

    async def flush_cache(self) -> None:
        await self.api.flush_cache(self.client)

    async def clear_storage(self, server_info: dict[str, Any]) -> bool:
        """Empty the server's storage tier where the API has one; False: nothing cleared."""
        if isinstance(self.api, SupportsStorageClear):
            return await self.api.clear_storage(self.client, server_info)
        return False

    async def hit_sources(self) -> dict[str, int] | None:
        """Cached prompt tokens so far by tier, for servers that count them apart from their
        answers (`SupportsHitSources`); None for the others."""
        if isinstance(self.api, SupportsHitSources):
            return await self.api.hit_sources(self.client)
        return None

    async def complete(self, input_ids: np.ndarray, request_id: str, *, max_new_tokens: int,
                       top_k: int, vocab_size: int | None,
                       extras: RequestExtras = NO_EXTRAS) -> Completion:
        """One generation: the adapter's request, sent, and its answer parsed strictly. An
        adapter that `SupportsFastParse` reads the answer's text itself (typed decoding).
        `extras` (prompt logprobs, a cache key) need an adapter that `SupportsRequestExtras`
        (a UsageError otherwise)."""
        if not extras.plain:
            return await self._complete_with_extras(input_ids, request_id, max_new_tokens,
                                                    top_k, vocab_size, extras)
        budget = response_budget(len(input_ids), max_new_tokens, top_k)
        try:
            if isinstance(self.api, SupportsFastParse):
                text = await self._post(lambda: self.api.request(input_ids, max_new_tokens, top_k),
                                        request_id, budget)
                return checked_counts(self.api.parse_text(text, request_id,
                                                          max_new_tokens=max_new_tokens,
                                                          top_k=top_k, vocab_size=vocab_size),
                                      request_id)
            text = await self._post(lambda: self.api.request(input_ids, max_new_tokens, top_k),
                                    request_id, budget)
            raw = decode(text, f"request {request_id}")
            return checked_counts(self.api.parse(raw, request_id, max_new_tokens=max_new_tokens,
                                                 top_k=top_k, vocab_size=vocab_size), request_id)
        except MalformedResponse as exc:  # its message may quote what the server sent
            raise MalformedResponse(self.client.scrub(str(exc))) from None


    async def _complete_with_extras(self, input_ids: np.ndarray, request_id: str,
                                    max_new_tokens: int, top_k: int, vocab_size: int | None,
                                    extras: RequestExtras) -> Completion:
        api = self.api
        if not isinstance(api, SupportsRequestExtras):
            raise UsageError(f"the golden asks for prompt logprobs or a cache key, which the "
                             f"{api.name} API cannot send (use --api sglang)")
        budget = response_budget(2 * len(input_ids), max_new_tokens, top_k)
        start = extras.prompt_logprobs_from
        try:
            text = await self._post(
                lambda: api.extras_request(input_ids, max_new_tokens, top_k, extras),
                request_id, budget)
            completion = self.api.parse(decode(text, f"request {request_id}"), request_id,
                                        max_new_tokens=max_new_tokens, top_k=top_k,
                                        vocab_size=vocab_size)
            if start >= 0:
                values, misreported = api.parse_prompt_logprobs(text, request_id, input_ids,
                                                                start)
                completion.prompt_logprobs, completion.misreported_ids = values, misreported
            return completion
        except MalformedResponse as exc:
            raise MalformedResponse(self.client.scrub(str(exc))) from None


    async def _post(self, build: Callable[[], tuple[str, dict[str, Any]]], request_id: str,
                    budget: int) -> bytes:
        """POST what `build()` makes; when the server refuses it and the adapter then builds a
        form the server may take (`SupportsResend`: SGLang's top-k form for an older release),
        the rebuilt body once more."""
        path, body = build()
        try:
            return await self.client.post_text(path, body, request_id, max_bytes=budget)
        except RefusedRequest as exc:
            if not (isinstance(self.api, SupportsResend)
                    and self.api.refused(body, exc.status, exc.text)):
                raise
        path, body = build()
        return await self.client.post_text(path, body, request_id, max_bytes=budget)


def response_budget(prompt_tokens: int, max_new_tokens: int, top_k: int) -> int:
    """The most bytes an honest answer to one generation can take, generously: real answers
    spend 30-300 bytes per (position, candidate) entry (OpenAI's are the longest: token text and
    bytes); 1 KiB each, 64 bytes per prompt token (echoed tokens) and 1 MiB of slack."""
    return 2**20 + 64 * prompt_tokens + 1024 * max_new_tokens * (top_k + 1)


@contextlib.asynccontextmanager
async def connect(url: str, options: ClientOptions | None = None, api: str = "auto", *,
                  reference: bool = False) -> AsyncIterator[Connection]:
    """`async with connect(url, options, api) as conn:`. `api` is an adapter name or `auto`
    (ask the server); `reference` turns per-request cache switches off (see `get_api`)."""
    async with ServerClient(url, options) as client:
        adapter = await resolve_api(client, api, reference=reference)
        if isinstance(adapter, SupportsPrepare):
            await adapter.prepare(client)
        yield Connection(client, adapter)
