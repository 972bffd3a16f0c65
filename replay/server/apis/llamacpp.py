"""llama.cpp's native API: POST /completion with a token-id prompt (docs/apis.md).

One greedy request per completion: `samplers: ["temperature"]` with `temperature: 0` keeps only
the arg-max (a sampler chain without "temperature" would ignore temperature 0, and the server's
default chain could carry penalties set by its flags), `ignore_eos` keeps every answer at exactly
`n_predict` tokens, `return_tokens` returns the ids, and `n_probs` (at least 1, so the chosen
token's value always comes back) returns per-token logprobs computed before sampling.

`cache_prompt` is chosen by the role: a reference recording sends `false` (every request
evaluates its whole prompt, whatever the server's flags), a replay sends `true`. The server
reports the reused prompt length per request in `timings.cache_n`.

The row parser is shared with the OpenAI adapter: llama.cpp's /v1/completions carries the same
rows under `choices[0].logprobs.content`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from replay.utils.errors import MalformedResponse, ServerError
from replay.server.apis.base import Completion, token_id
from replay.server.apis.base import malformed as fail

if TYPE_CHECKING:
    from replay.server.transport import ServerClient

GREEDY: dict[str, Any] = {"temperature": 0.0, "samplers": ["temperature"], "ignore_eos": True}
FINISH = {"limit": "length", "eos": "stop", "word": "stop"}  # stop_type -> OpenAI-style name
FLUSH_NOTE = ("POST /slots/{id}?action=erase for every slot (needs --slot-save-path); entries in "
              "the --cache-ram host cache are never erased, so a repeat may start warm")


def count(value: Any, request_id: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(request_id, f"{where} is {value!r}, not a count")
    return value


def logprob(value: Any, request_id: str, where: str) -> float:
    """A finite number <= 0 (llama.cpp writes log(0) as the lowest float32, never -inf/null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(request_id, f"{where} is {str(value)[:40]!r}, not a logprob")
    try:
        x = float(value)
    except OverflowError:  # an integer past float64's range
        raise fail(request_id, f"{where} is an integer past float64's range") from None
    if not math.isfinite(x) or x > 0.0:
        raise fail(request_id, f"{where} = {value!r} is not a logprob")
    return x


def top_width(top_k: int, vocab_size: int | None) -> int:
    """How many top entries a row must carry: llama.cpp sends min(n_probs, n_vocab)."""
    return top_k if vocab_size is None else min(top_k, vocab_size)


def parse_rows(rows: Any, tokens: list[int] | None, request_id: str, *, where: str, n: int,
               top_k: int, vocab_size: int | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """llama.cpp's per-token rows `{id, logprob, top_logprobs: [{id, logprob}]}`.

    Returns (ids, logprobs, top_ids, top_logprobs); the top arrays are None when top_k is 0.
    `tokens`, when given, are the ids the rows must name, in order.
    """
    if not isinstance(rows, list):
        raise fail(request_id, f"{where} is {type(rows).__name__}, not a list of rows")
    if len(rows) != n:
        raise fail(request_id, f"{where} has {len(rows)} rows for {n} output tokens" + (
            " (llama.cpp leaves out the row of a token that ends the text inside an incomplete "
            "UTF-8 character, e.g. a byte-fallback token; the values of that token are lost)"
            if len(rows) < n else ""))
    ids = np.empty(n, dtype=np.int32)
    values = np.empty(n, dtype=np.float64)
    width = top_width(top_k, vocab_size)
    top_ids = np.full((n, top_k), -1, dtype=np.int32) if top_k else None
    top_lps = np.full((n, top_k), np.nan, dtype=np.float64) if top_k else None
    for i, row in enumerate(rows):
        at = f"{where}[{i}]"
        if not isinstance(row, dict):
            raise fail(request_id, f"{at} is {row!r}, not an object")
        if "logprob" not in row and "prob" in row:
            raise fail(request_id, f"{at} carries probabilities (post_sampling_probs), not logprobs")
        ids[i] = token_id(row.get("id"), request_id, f"{at}.id", vocab_size)
        if tokens is not None and ids[i] != tokens[i]:
            raise fail(request_id, f"{at} names token {ids[i]}, tokens[{i}] is {tokens[i]}")
        values[i] = logprob(row.get("logprob"), request_id, f"{at}.logprob")
        if top_ids is not None and top_lps is not None:
            _top_row(row.get("top_logprobs"), request_id, f"{at}.top_logprobs", width, vocab_size,
                     top_ids[i], top_lps[i])
    return ids, values, top_ids, top_lps


def _top_row(entries: Any, request_id: str, where: str, width: int, vocab_size: int | None,
             ids_out: np.ndarray, values_out: np.ndarray) -> None:
    if not isinstance(entries, list) or len(entries) != width:
        got = len(entries) if isinstance(entries, list) else entries
        raise fail(request_id, f"{where} has {got!r} entries, expected {width}")
    seen: set[int] = set()
    for j, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise fail(request_id, f"{where}[{j}] is {entry!r}, not an object")
        tok = token_id(entry.get("id"), request_id, f"{where}[{j}].id", vocab_size)
        if tok in seen:
            raise fail(request_id, f"{where} lists token {tok} twice")
        seen.add(tok)
        ids_out[j] = tok
        values_out[j] = logprob(entry.get("logprob"), request_id, f"{where}[{j}].logprob")


def gguf_identity(model_id: str) -> str:
    """A model's identity for goldens: a GGUF file by its name (not the directory it sits in, which
    differs between machines); anything else (an --alias, a hub id) as given."""
    return model_id.rsplit("/", 1)[-1] if model_id.endswith(".gguf") else model_id


async def first_model(client: "ServerClient") -> dict[str, Any] | None:
    """`/v1/models` data[0] (llama.cpp serves exactly one), or None when not answered."""
    status, _ = await client.raw("GET", "/v1/models", "/v1/models")
    if status != 200:
        return None
    data = (await client.get_json("/v1/models")).get("data")
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise MalformedResponse("/v1/models: expected a non-empty `data` list of models")
    return data[0]


def model_fields(model: dict[str, Any]) -> dict[str, Any]:
    """model_path (identity) and vocab_size from one /v1/models entry, plus its cheap metadata."""
    model_id = model.get("id")
    if not isinstance(model_id, str) or not model_id:
        raise MalformedResponse(f"/v1/models: model id is {model_id!r}")
    info: dict[str, Any] = {"model_path": gguf_identity(model_id), "model_id": model_id}
    meta = model.get("meta")
    if isinstance(meta, dict):
        n_vocab = meta.get("n_vocab")
        if isinstance(n_vocab, int) and not isinstance(n_vocab, bool) and n_vocab > 0:
            info["vocab_size"] = n_vocab
        info.update({k: meta[k] for k in ("vocab_type", "n_ctx_train", "n_embd", "n_params", "size")
                     if k in meta})
    return info


class LlamaCppApi:
    name = "llamacpp"
    expect_cache_auto = "none"  # hit lengths depend on slot assignment: judged only when asked
    flush_note = FLUSH_NOTE

    def __init__(self, *, cache_prompt: bool = True) -> None:
        self.cache_prompt = cache_prompt

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
            "cache_prompt": self.cache_prompt,
            "disable_radix_cache": not self.cache_prompt,
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

    async def clear_storage(self, client: "ServerClient", server_info: dict[str, Any]) -> bool:
        """No storage tier to clear through this API."""
        return False

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
