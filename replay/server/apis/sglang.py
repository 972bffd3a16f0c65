"""SGLang's native API: POST /generate with input_ids; its answers are read by the strict
parser in `replay.server.apis.sglang_parse` (sglang-protocol.md). Anything outside the protocol's promise
raises `MalformedResponse` naming the request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from replay.server.apis.base import SAMPLING, Completion, MisreportedId, RequestExtras
from replay.server.apis.sglang_parse import parse_completion, parse_prompt_logprobs, parse_text
from replay.server.apis.sglang_wire import NEWEST, Wire, fallback_for, wire_for
from replay.utils.errors import ServerError

__all__ = ["SGLangApi", "generate_body", "parse_completion", "parse_text"]

if TYPE_CHECKING:
    from replay.server.transport import ServerClient


FLUSH_TIMEOUT = 30.0  # seconds the server may wait for running requests before flushing


class SGLangApi:
    name = "sglang"
    expect_cache_auto = None  # decided from /server_info (radix cache, hybrid model)
    flush_note = "POST /flush_cache before each repeat"
    bypasses_cache = False  # reuse is the server's setting (--disable-radix-cache)

    def __init__(self, wire: Wire = NEWEST) -> None:
        self.wire = wire  # the top-k form the bodies ask for (sglang_wire: by server version)

    async def prepare(self, client: "ServerClient") -> None:
        """The body form for the release the server reports (`version` in /server_info; behind
        SGLang's router, its workers')."""
        info = await self.server_info(client)
        self.wire = wire_for(info.get("version"))

    def refused(self, body: dict[str, Any], status: int, text: str) -> bool:
        """After the server refused `body`: True when a form it may take exists (nested top-k
        after a 400 that names a flat key), which this and the next bodies then use."""
        wire = fallback_for(body, status, text, self.wire.version)
        if wire is None:
            return False
        if self.wire.flat_output:
            self.wire = wire
        return True

    def request(self, input_ids: np.ndarray, max_new_tokens: int, top_k: int) -> tuple[str, dict[str, Any]]:
        return "/generate", generate_body(input_ids, max_new_tokens, top_k, self.wire)

    def extras_request(self, input_ids: np.ndarray, max_new_tokens: int, top_k: int,
                       extras: RequestExtras) -> tuple[str, dict[str, Any]]:
        """`request`'s body plus `logprob_start_len` (SGLang then reuses at most that many
        cached prompt tokens and returns `input_token_logprobs` from there) and `extra_key`
        (its radix cache keeps requests with different keys apart)."""
        body = generate_body(input_ids, max_new_tokens, top_k, self.wire)
        if extras.prompt_logprobs_from >= 0:
            body["logprob_start_len"] = int(extras.prompt_logprobs_from)
        if extras.cache_key is not None:
            body["extra_key"] = extras.cache_key
        return "/generate", body

    def parse_prompt_logprobs(self, text: str | bytes, request_id: str, input_ids: np.ndarray,
                              start: int) -> tuple[np.ndarray, tuple[MisreportedId, ...]]:
        return parse_prompt_logprobs(text, request_id, input_ids, start)

    def parse(self, obj: Any, request_id: str, *, max_new_tokens: int, top_k: int,
              vocab_size: int | None) -> Completion:
        return parse_completion(obj, request_id, max_new_tokens=max_new_tokens, top_k=top_k,
                                vocab_size=vocab_size)

    def parse_text(self, text: str, request_id: str, *, max_new_tokens: int, top_k: int,
                   vocab_size: int | None) -> Completion:
        """The answer read from its JSON text (typed decoding: see `sglang_parse`)."""
        return parse_text(text, request_id, max_new_tokens=max_new_tokens, top_k=top_k,
                          vocab_size=vocab_size)

    async def server_info(self, client: "ServerClient") -> dict[str, Any]:
        info = await client.get_json("/server_info", fallback="/get_server_info")
        if info.get("router_manager"):  # SGLang's router: the facts are its workers'
            return await router_facts(client)
        if isinstance(info.get("prefill"), list) and info["prefill"] and "decode" in info:
            return mini_lb_facts(info)  # sglang-router's MiniLB (--mini-lb): PD workers' facts
        return info

    async def model_info(self, client: "ServerClient") -> dict[str, Any]:
        return await client.get_json("/model_info", fallback="/get_model_info")

    async def flush_cache(self, client: "ServerClient") -> None:
        """`?timeout=` makes the server itself wait until idle (0.5.23); an older server ignores
        the parameter and answers 400 while busy, which the client retries briefly."""
        await client.post_until_idle(f"/flush_cache?timeout={FLUSH_TIMEOUT:g}")

    async def clear_storage(self, client: "ServerClient", server_info: dict[str, Any]) -> bool:
        """POST /hicache/storage-backend/clear when an L3 backend is attached (a flush keeps L3).
        The endpoint takes the admin key where the server has one, else the API key."""
        if not server_info.get("hicache_storage_backend"):
            return False
        if ROUTER_KEY in server_info:  # behind a router: every worker clears its own tier
            for url in server_info[ROUTER_KEY]["workers"]:
                async with type(client)(url, client.options) as worker:
                    await self.clear_storage(worker, {"hicache_storage_backend": True})
            return True
        path = "/hicache/storage-backend/clear"
        admin = client.options.admin_api_key
        headers = {"Authorization": f"Bearer {admin}"} if admin else None
        status, text = await client.raw("POST", path, path, headers=headers)
        if status != 200:
            hint = (" (pass the server's --admin-api-key as --admin-api-key or "
                    "GOLDEN_ADMIN_API_KEY)" if status in (401, 403) else "")
            raise ServerError(f"{client.url}{path} answered HTTP {status}: {text.strip()[:200]}"
                              f"{hint}; repeats cannot start from an empty L3 storage tier")
        return True


def generate_body(input_ids: np.ndarray, max_new_tokens: int, top_k: int,
                  wire: Wire = NEWEST) -> dict[str, Any]:
    """A greedy generate request asking for output logprobs only (prefix reuse stays possible),
    its top-k in the form `wire` says the server takes (flat base64 arrays where it can: exact
    bits and far cheaper to parse; the parser reads either form)."""
    body: dict[str, Any] = {
        "input_ids": np.asarray(input_ids, dtype=np.int64).tolist(),
        "sampling_params": {**SAMPLING, "max_new_tokens": int(max_new_tokens)},
        "return_logprob": True,
        "logprob_start_len": -1,
        "top_logprobs_num": int(top_k),
        "return_text_in_logprobs": False,
    }
    body.update(wire.top_k_keys(top_k))
    return body


ROUTER_KEY = "router"  # in server_info behind SGLang's router: {"workers": [url, ...], ...}


async def router_facts(client: "ServerClient") -> dict[str, Any]:
    """Behind SGLang's router (its /get_server_info says `router_manager`), what the workers say:
    worker 0's /server_info (page size, radix cache, numerics: what the replay checks; behind a PD
    router, prefill worker 0's), with the router's worker list and every worker's settings under
    `router`."""
    listed = await client.get_json("/workers")
    entries = [w for w in listed.get("workers", []) if isinstance(w, dict) and "url" in w]
    urls = sorted(str(w["url"]) for w in entries)
    if not urls:
        raise ServerError(f"{client.url} is SGLang's router, but its /workers lists no worker")
    infos = []
    for url in urls:
        async with type(client)(url, client.options) as worker:
            infos.append(await worker.get_json("/server_info", fallback="/get_server_info"))
    # PD: a prefill worker's facts (prefix reuse happens there; decode runs no radix cache)
    prefill = sorted(str(w["url"]) for w in entries if w.get("worker_type") == "prefill")
    facts = dict(infos[urls.index(prefill[0])] if prefill else infos[0])
    facts[ROUTER_KEY] = {"workers": sorted(urls), "worker_server_info": infos}
    return facts


def mini_lb_facts(info: dict[str, Any]) -> dict[str, Any]:
    """sglang-router's MiniLB answers /get_server_info with its prefill and decode workers' own
    answers (no URLs): prefill worker 0's are the facts, as behind the Rust PD router."""
    facts = dict(info["prefill"][0])
    facts[ROUTER_KEY] = {"workers": [], "worker_server_info": [*info["prefill"],
                                                                *info.get("decode", [])]}
    return facts
