"""SGLang's native API: POST /generate with input_ids, and the strict parser of its answer
(sglang-protocol.md). Anything outside the protocol's promise raises `MalformedResponse` naming
the request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from replay.apis.base import SAMPLING, Completion, malformed, number, token_id
from replay.errors import ServerError

if TYPE_CHECKING:
    from replay.client import ServerClient


FLUSH_TIMEOUT = 30.0  # seconds the server may wait for running requests before flushing


class SGLangApi:
    name = "sglang"
    expect_cache_auto = None  # decided from /server_info (radix cache, hybrid model)
    flush_note = "POST /flush_cache before each repeat"

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
        """`?timeout=` makes the server itself wait until idle (0.5.23); an older server ignores
        the parameter and answers 400 while busy, which the client retries briefly."""
        await client.post_until_idle(f"/flush_cache?timeout={FLUSH_TIMEOUT:g}")

    async def clear_storage(self, client: "ServerClient", server_info: dict[str, Any]) -> bool:
        """POST /hicache/storage-backend/clear when an L3 backend is attached (a flush keeps L3).
        The endpoint takes the admin key where the server has one, else the API key."""
        if not server_info.get("hicache_storage_backend"):
            return False
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


def generate_body(input_ids: np.ndarray, max_new_tokens: int, top_k: int) -> dict[str, Any]:
    """A greedy generate request asking for output logprobs only (prefix reuse stays possible)."""
    body: dict[str, Any] = {
        "input_ids": [int(t) for t in input_ids],
        "sampling_params": {**SAMPLING, "max_new_tokens": int(max_new_tokens)},
        "return_logprob": True,
        "logprob_start_len": -1,
        "top_logprobs_num": int(top_k),
        "return_text_in_logprobs": False,
    }
    return body


def _count(meta: dict[str, Any], key: str, request_id: str, required: bool) -> int | None:
    value = meta.get(key)
    if value is None:
        if required:
            raise malformed(request_id, f"meta_info.{key} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise malformed(request_id, f"meta_info.{key} is {value!r}, not a count")
    return value


def parse_completion(
    obj: Any,
    request_id: str,
    *,
    max_new_tokens: int,
    top_k: int,
    vocab_size: int | None = None,
) -> Completion:
    """Validate and convert one /generate response object."""
    if not isinstance(obj, dict):
        raise malformed(request_id, f"expected a JSON object, got {type(obj).__name__}")
    meta = obj.get("meta_info")
    if not isinstance(meta, dict):
        raise malformed(request_id, "meta_info is missing")
    ids_raw = obj.get("output_ids")
    if not isinstance(ids_raw, list):
        raise malformed(request_id, "output_ids is missing")
    n = len(ids_raw)
    output_ids = np.array(
        [token_id(t, request_id, f"output_ids[{i}]", vocab_size) for i, t in enumerate(ids_raw)],
        dtype=np.int32,
    )
    aborted = meta.get("finish_reason")
    if isinstance(aborted, dict) and aborted.get("type") == "abort":
        # SGLang answers an abort without a status (e.g. /abort_request) with 200 and the tokens
        # so far: a server-side error, not a malformed answer
        raise ServerError(f"request {request_id}: the server aborted it after {n} of "
                          f"{max_new_tokens} tokens: {aborted.get('message')}")
    if n != max_new_tokens:
        raise malformed(request_id, f"{n} output tokens, expected exactly {max_new_tokens} (ignore_eos)")

    token_lps = meta.get("output_token_logprobs")
    if not isinstance(token_lps, list) or len(token_lps) != n:
        got = len(token_lps) if isinstance(token_lps, list) else token_lps
        raise malformed(request_id, f"output_token_logprobs has {got!r} entries for {n} output ids")
    logprobs = _fast_token_logprobs(token_lps, output_ids, vocab_size)
    if logprobs is None:  # something is off: the slow path names it
        logprobs = _checked_token_logprobs(token_lps, output_ids, request_id, vocab_size)

    top_ids = top_lps = None
    if top_k > 0:
        rows = meta.get("output_top_logprobs")
        if not isinstance(rows, list) or len(rows) != n:
            got = len(rows) if isinstance(rows, list) else rows
            raise malformed(request_id, f"output_top_logprobs has {got!r} rows for {n} output ids")
        fast = _fast_top(rows, top_k, vocab_size)
        top_ids, top_lps = fast if fast else _checked_top(rows, request_id, top_k, vocab_size)

    finish = meta.get("finish_reason")
    finish_type = finish.get("type") if isinstance(finish, dict) else finish
    if not isinstance(finish_type, str):
        raise malformed(request_id, f"finish_reason is {finish!r}")

    cached = _count(meta, "cached_tokens", request_id, required=True)
    details_raw = meta.get("cached_tokens_details") or {}
    if not isinstance(details_raw, dict):
        raise malformed(request_id, f"cached_tokens_details is {details_raw!r}")
    details = {
        k: int(v) for k, v in details_raw.items()
        if isinstance(v, int) and not isinstance(v, bool)
    }
    return Completion(
        output_ids=output_ids,
        logprobs=logprobs,
        top_ids=top_ids,
        top_logprobs=top_lps,
        cached_tokens=int(cached or 0),
        cached_details=details,
        finish_reason=finish_type,
        prompt_tokens=_count(meta, "prompt_tokens", request_id, required=False),
        num_retractions=_count(meta, "num_retractions", request_id, required=False) or 0,
    )


def _checked_token_logprobs(
    entries: list[Any], output_ids: np.ndarray, request_id: str, vocab_size: int | None
) -> np.ndarray:
    logprobs = np.empty(len(entries), dtype=np.float64)
    for i, entry in enumerate(entries):
        if not isinstance(entry, list) or len(entry) < 2:
            raise malformed(request_id, f"output_token_logprobs[{i}] is {entry!r}")
        logprobs[i] = number(entry[0], request_id, f"output_token_logprobs[{i}][0]")
        tok = token_id(entry[1], request_id, f"output_token_logprobs[{i}][1]", vocab_size)
        if tok != output_ids[i]:
            raise malformed(request_id, f"output_token_logprobs[{i}] names token {tok}, output_ids has {output_ids[i]}")
    return logprobs


_NUMBER_TYPES = {float, int}


def _fast_token_logprobs(
    entries: list[Any], output_ids: np.ndarray, vocab_size: int | None
) -> np.ndarray | None:
    """The common, well-formed case in a few C-speed passes; None when anything is unusual."""
    try:
        values = [e[0] for e in entries]
        tokens = [e[1] for e in entries]
    except (TypeError, IndexError, KeyError):
        return None
    if not set(map(type, values)) <= _NUMBER_TYPES or not set(map(type, tokens)) <= {int}:
        return None
    if tokens and not np.array_equal(np.array(tokens, dtype=np.int64), output_ids):
        return None
    return np.array(values, dtype=np.float64)


def _fast_top(
    rows: list[Any], k: int, vocab_size: int | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Full rows of exactly k well-typed, in-vocabulary, distinct entries; else None."""
    n = len(rows)
    try:
        if any(type(row) is not list or len(row) != k for row in rows):
            return None
        flat = [e for row in rows for e in row]
        values = [e[0] for e in flat]
        tokens = [e[1] for e in flat]
    except (TypeError, IndexError, KeyError):
        return None
    if not set(map(type, values)) <= _NUMBER_TYPES or not set(map(type, tokens)) <= {int}:
        return None
    ids = np.array(tokens, dtype=np.int64).reshape(n, k)
    if ids.size and (ids.min() < 0 or (vocab_size is not None and ids.max() >= vocab_size)):
        return None
    ordered = np.sort(ids, axis=1)
    if k > 1 and np.any(ordered[:, 1:] == ordered[:, :-1]):
        return None
    return ids.astype(np.int32), np.array(values, dtype=np.float64).reshape(n, k)


def _checked_top(
    rows: list[Any], request_id: str, k: int, vocab_size: int | None
) -> tuple[np.ndarray, np.ndarray]:
    n = len(rows)
    ids = np.full((n, k), -1, dtype=np.int32)
    vals = np.full((n, k), np.nan, dtype=np.float64)
    for i, row in enumerate(rows):
        if row is None:
            continue
        if not isinstance(row, list) or len(row) > k:
            raise malformed(request_id, f"output_top_logprobs[{i}] is not a list of at most {k} entries")
        seen: set[int] = set()
        for j, entry in enumerate(row):
            if not isinstance(entry, list) or len(entry) < 2:
                raise malformed(request_id, f"output_top_logprobs[{i}][{j}] is {entry!r}")
            tok = token_id(entry[1], request_id, f"output_top_logprobs[{i}][{j}][1]", vocab_size)
            if tok in seen:
                raise malformed(request_id, f"output_top_logprobs[{i}] lists token {tok} twice")
            seen.add(tok)
            ids[i, j] = tok
            vals[i, j] = number(entry[0], request_id, f"output_top_logprobs[{i}][{j}][0]")
    return ids, vals

