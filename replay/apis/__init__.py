"""Server APIs: how a request is asked for and how its answer is read, per protocol.

The recorder, replayer and diff know nothing about the API: the client sends what `Api.request`
builds and hands back what `Api.parse` makes of the answer, a `replay.protocol.Completion`.
A golden records which API produced it (`meta.api`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from replay.errors import UsageError
from replay.protocol import Completion

if TYPE_CHECKING:
    from replay.client import ServerClient


class Api(Protocol):
    name: str

    def request(self, input_ids: np.ndarray, max_new_tokens: int, top_k: int) -> tuple[str, dict[str, Any]]:
        """The (path, JSON body) of one greedy generation with output logprobs."""
        ...

    def parse(self, obj: Any, request_id: str, *, max_new_tokens: int, top_k: int,
              vocab_size: int | None) -> Completion:
        """The answer, validated strictly (MalformedResponse naming the request otherwise)."""
        ...

    async def server_info(self, client: "ServerClient") -> dict[str, Any]:
        """Server settings, SGLang-style keys where they exist (page_size, disable_radix_cache...)."""
        ...

    async def model_info(self, client: "ServerClient") -> dict[str, Any]:
        """At least `model_path` (the model's identity) and, when known, `vocab_size`."""
        ...

    async def flush_cache(self, client: "ServerClient") -> None:
        """Empty the server's prefix cache (before each replay repeat)."""
        ...


API_NAMES = ("sglang", "openai", "llamacpp")


def get_api(name: str, *, reference: bool = False) -> Api:
    """The adapter for `name`. `reference` is true when recording a reference: adapters whose
    server takes a per-request cache switch (llama.cpp's `cache_prompt`) then turn reuse off, so
    the reference is cache-free whatever the server's flags (docs/apis.md)."""
    if name == "sglang":
        from replay.apis.sglang import SGLangApi

        return SGLangApi()
    if name == "openai":
        from replay.apis.openai import OpenAIApi

        return OpenAIApi(reference=reference)
    if name == "llamacpp":
        from replay.apis.llamacpp import LlamaCppApi

        return LlamaCppApi(cache_prompt=not reference)
    raise UsageError(f"unknown --api {name!r} (choose from auto, {', '.join(API_NAMES)})")


async def detect_api(client: "ServerClient") -> str:
    """Which API the server speaks: SGLang answers /server_info, llama.cpp /props, and any
    OpenAI-compatible server /v1/models."""
    for path, name in (("/server_info", "sglang"), ("/get_server_info", "sglang"),
                       ("/props", "llamacpp"), ("/v1/models", "openai")):
        status, _ = await client.raw("GET", path, "detect api")
        if status == 200:
            return name
    raise UsageError(f"{client.url} answers none of /server_info, /props, /v1/models: "
                     "pass --api sglang|openai|llamacpp")
