"""What the OpenAI-style adapters share (llama.cpp's native API and any OpenAI-compatible
server): strict readers of counts and logprobs, the per-token row parser (llama.cpp's
`completion_probabilities` and its /v1/completions `choices[0].logprobs.content` carry the same
rows) and the `/v1/models` readers. Nothing here knows which adapter calls it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from replay.server.apis.base import malformed as fail
from replay.server.apis.base import token_id
from replay.utils.errors import MalformedResponse

if TYPE_CHECKING:
    from replay.server.transport import ServerClient

__all__ = ["count", "fail", "first_model", "gguf_identity", "logprob", "model_fields",
           "parse_rows", "token_id", "top_width"]


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
