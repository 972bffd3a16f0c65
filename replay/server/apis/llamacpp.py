"""llama.cpp's native API: POST /completion with a token-id prompt (docs/apis.md).

One greedy request per completion: `samplers: ["temperature"]` with `temperature: 0` keeps only
the arg-max (a sampler chain without "temperature" would ignore temperature 0, and the server's
default chain could carry penalties set by its flags), `ignore_eos` keeps every answer at exactly
`n_predict` tokens, `return_tokens` returns the ids, and `n_probs` (at least 1, so the chosen
token's value always comes back) returns per-token logprobs computed before sampling.

`cache_prompt` is chosen by the role: a reference recording sends `false` (every request
evaluates its whole prompt, whatever the server's flags), a replay sends `true`. The server
reports the reused prompt length per request in `timings.cache_n`.

The row parser and the /v1/models readers are shared with the OpenAI adapter
(`replay.server.apis.openai_style`): llama.cpp's /v1/completions carries the same rows under
`choices[0].logprobs.content`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from replay.server.apis.base import Completion, token_id
from replay.server.apis.base import malformed as fail
from replay.server.apis.openai_style import (count, first_model, gguf_identity, model_fields,
                                             parse_rows)
from replay.utils.errors import MalformedResponse, ServerError

if TYPE_CHECKING:
    from replay.server.transport import ServerClient

GREEDY: dict[str, Any] = {"temperature": 0.0, "samplers": ["temperature"], "ignore_eos": True}
FINISH = {"limit": "length", "eos": "stop", "word": "stop"}  # stop_type -> OpenAI-style name
FLUSH_NOTE = ("POST /slots/{id}?action=erase for every slot (needs --slot-save-path); entries in "
              "the --cache-ram host cache are never erased, so a repeat may start warm")


class LlamaCppApi:
    name = "llamacpp"
    expect_cache_auto = "none"  # hit lengths depend on slot assignment: judged only when asked
    flush_note = FLUSH_NOTE

    def __init__(self, *, cache_prompt: bool = True) -> None:
        self.cache_prompt = cache_prompt
        self.bypasses_cache = not cache_prompt  # a reference: every prompt evaluated in full

    def request(self, input_ids: np.ndarray, max_new_tokens: int, top_k: int) -> tuple[str, dict[str, Any]]:
        return "/completion", {
            "prompt": [int(t) for t in input_ids],
            "n_predict": int(max_new_tokens),
            "n_probs": max(1, int(top_k)),
            **GREEDY,
            "cache_prompt": self.cache_prompt,
            "return_tokens": True,
            "post_sampling_probs": False,
            "stream": False,
        }

    def parse(self, obj: Any, request_id: str, *, max_new_tokens: int, top_k: int,
              vocab_size: int | None) -> Completion:
        if not isinstance(obj, dict):
            raise fail(request_id, f"expected a JSON object, got {type(obj).__name__}")
        n = max_new_tokens
        raw_tokens = obj.get("tokens")
        if not isinstance(raw_tokens, list):
            raise fail(request_id, "tokens is missing (does the server know return_tokens?)")
        tokens = [token_id(t, request_id, f"tokens[{i}]", vocab_size) for i, t in enumerate(raw_tokens)]
        if len(tokens) != n:
            raise fail(request_id, f"{len(tokens)} output tokens, expected exactly {n} (ignore_eos)")
        if obj.get("truncated") is True:
            raise fail(request_id, "the context was exceeded (truncated): start the server with a "
                                   "larger --ctx-size per slot")
        ids, values, top_ids, top_lps = parse_rows(
            obj.get("completion_probabilities"), tokens, request_id,
            where="completion_probabilities", n=n, top_k=top_k, vocab_size=vocab_size)
        stop = obj.get("stop_type")
        if not isinstance(stop, str):
            raise fail(request_id, f"stop_type is {stop!r}")
        timings = obj.get("timings")
        if not isinstance(timings, dict):
            raise fail(request_id, "timings is missing")
        cached = count(timings.get("cache_n"), request_id, "timings.cache_n")
        evaluated = count(timings.get("prompt_n"), request_id, "timings.prompt_n")
        return Completion(
            output_ids=ids, logprobs=values, top_ids=top_ids, top_logprobs=top_lps,
            cached_tokens=cached, finish_reason=FINISH.get(stop, stop),
            prompt_tokens=cached + evaluated,
        )

    async def server_info(self, client: "ServerClient") -> dict[str, Any]:
        props = await client.get_json("/props")
        settings = props.get("default_generation_settings")
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        slot_actions = await _slot_actions(client)
        return {
            "model_path": props.get("model_path"),
            "model_alias": props.get("model_alias"),
            "build_info": props.get("build_info"),
            "total_slots": props.get("total_slots"),
            "n_ctx": n_ctx,
            "cache_prompt": self.cache_prompt,  # what this client sends (docs/apis.md)
            "slot_actions": slot_actions,
        }

    async def model_info(self, client: "ServerClient") -> dict[str, Any]:
        model = await first_model(client)
        if model is not None:
            return model_fields(model)
        path = (await client.get_json("/props")).get("model_path")
        if not isinstance(path, str) or not path:
            raise MalformedResponse(f"/props: model_path is {path!r}")
        return {"model_path": gguf_identity(path), "model_id": path}

    async def flush_cache(self, client: "ServerClient") -> None:
        """Erase every slot's cached prompt. Without --slot-save-path the server refuses slot
        actions: nothing can be erased, and server_info's `slot_actions` says so."""
        slots = (await client.get_json("/props")).get("total_slots")
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise MalformedResponse(f"/props: total_slots is {slots!r}")
        for slot in range(slots):
            path = f"/slots/{slot}?action=erase"
            status, text = await client.raw("POST", path, path)
            if status == 501 or (status == 404 and slot == 0):
                return  # slot actions are off (or unknown to this build): nothing to erase
            if status != 200:
                raise ServerError(f"{client.url}{path} answered HTTP {status}: {text[:200]}")


async def _slot_actions(client: "ServerClient") -> bool:
    """Whether POST /slots actions are enabled, asked without side effects: an unknown action is
    refused with 400 when they are, and with 501 (not supported) when they are not."""
    path = "/slots/0?action=golden-replay-probe"
    status, _ = await client.raw("POST", path, path)
    return status == 400
