"""SGLang's native API: POST /generate with input_ids (sglang-protocol.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from replay.protocol import Completion, generate_body, parse_completion

if TYPE_CHECKING:
    from replay.client import ServerClient


class SGLangApi:
    name = "sglang"

    def request(self, input_ids: np.ndarray, max_new_tokens: int, top_k: int) -> tuple[str, dict[str, Any]]:
        return "/generate", generate_body(input_ids, max_new_tokens, top_k)

    def parse(self, obj: Any, request_id: str, *, max_new_tokens: int, top_k: int,
              vocab_size: int | None) -> Completion:
        return parse_completion(obj, request_id, max_new_tokens=max_new_tokens, top_k=top_k,
                                vocab_size=vocab_size)

    async def server_info(self, client: "ServerClient") -> dict[str, Any]:
        return await client.get_json("/server_info", fallback="/get_server_info")

    async def model_info(self, client: "ServerClient") -> dict[str, Any]:
        return await client.get_json("/model_info", fallback="/get_model_info")

    async def flush_cache(self, client: "ServerClient") -> None:
        await client.post_until_idle("/flush_cache")
