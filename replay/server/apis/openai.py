"""An OpenAI-compatible server: POST /v1/completions with a token-id prompt (docs/apis.md).

The body asks for greedy decoding (`temperature: 0`), a fixed length (`max_tokens`, plus
`ignore_eos` and `min_tokens` for servers that know them), and `logprobs: k` (at least 1, so the
chosen token's value always comes back). Two answer shapes carry token ids, and only those are
accepted:
- llama.cpp's: `choices[0].logprobs.content[i] = {id, logprob, top_logprobs: [{id, logprob}]}`;
- the classic OpenAI shape (`tokens`, `token_logprobs`, `top_logprobs` as {token: logprob}) when
  every token is written `token_id:N`, which vLLM does on `return_tokens_as_token_ids: true`.
Anything else carries token *text*, from which ids cannot be recovered exactly (two ids may print
the same text; a byte-fallback piece prints as nothing): such an answer is refused, never guessed.

There is no standard way to empty a server's prefix cache: `flush_cache` does nothing, and the
adapter's `flush_note` says so (it lands in every golden and report as `meta.flush`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from replay.server.apis.base import Completion, token_id
from replay.server.apis.base import malformed as fail
from replay.server.apis.openai_style import (count, first_model, logprob, model_fields,
                                             parse_rows, top_width)
from replay.utils.errors import MalformedResponse

if TYPE_CHECKING:
    from replay.server.transport import ServerClient

ID_PREFIX = "token_id:"
FLUSH_NOTE = "none: the OpenAI API has no cache flush, so a repeat may start warm"


class OpenAIApi:
    name = "openai"
    expect_cache_auto = "none"  # no standard hit report to judge
    flush_note = FLUSH_NOTE
    bypasses_cache = False  # `cache_prompt: false` is llama.cpp's; other servers may ignore it

    def __init__(self, *, reference: bool = False) -> None:
        self.reference = reference
        self.model_id: str | None = None  # the body's `model`, learned by `prepare`

    def request(self, input_ids: np.ndarray, max_new_tokens: int, top_k: int) -> tuple[str, dict[str, Any]]:
        n = int(max_new_tokens)
        body: dict[str, Any] = {
            "prompt": [int(t) for t in input_ids],
            "max_tokens": n,
            "temperature": 0,
            "logprobs": max(1, int(top_k)),
            "echo": False,
            "stream": False,
            "n": 1,
            "ignore_eos": True,
            "min_tokens": n,
            "return_tokens_as_token_ids": True,
        }
        if self.model_id is not None:
            body["model"] = self.model_id
        if self.reference:
            body["cache_prompt"] = False  # llama.cpp's switch; other servers ignore it
        return "/v1/completions", body

    def parse(self, obj: Any, request_id: str, *, max_new_tokens: int, top_k: int,
              vocab_size: int | None) -> Completion:
        if not isinstance(obj, dict):
            raise fail(request_id, f"expected a JSON object, got {type(obj).__name__}")
        choices = obj.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            raise fail(request_id, "choices is not a list of exactly one choice")
        choice = choices[0]
        lps = choice.get("logprobs")
        if not isinstance(lps, dict):
            raise fail(request_id, f"choices[0].logprobs is {lps!r}")
        n = max_new_tokens
        if "content" in lps:
            ids, values, top_ids, top_lps = parse_rows(
                lps["content"], None, request_id, where="choices[0].logprobs.content", n=n,
                top_k=top_k, vocab_size=vocab_size)
        elif "tokens" in lps:
            ids, values, top_ids, top_lps = _classic(lps, request_id, n, top_k, vocab_size)
        else:
            raise fail(request_id, "choices[0].logprobs has neither content nor tokens")
        finish = choice.get("finish_reason")
        if not isinstance(finish, str):
            raise fail(request_id, f"choices[0].finish_reason is {finish!r}")
        cached, prompt = _usage(obj.get("usage"), request_id)
        return Completion(output_ids=ids, logprobs=values, top_ids=top_ids, top_logprobs=top_lps,
                          cached_tokens=cached, finish_reason=finish, prompt_tokens=prompt)

    async def server_info(self, client: "ServerClient") -> dict[str, Any]:
        models = (await client.get_json("/v1/models")).get("data")
        ids = [m.get("id") for m in models if isinstance(m, dict)] if isinstance(models, list) else []
        return {"served_models": ids}

    async def prepare(self, client: "ServerClient") -> None:
        """Learn the served model's id, which every request then names (`SupportsPrepare`);
        without it a request names no model, which single-model servers accept."""
        self.model_id = (await self.model_info(client))["model_id"]

    async def model_info(self, client: "ServerClient") -> dict[str, Any]:
        model = await first_model(client)
        if model is None:
            raise MalformedResponse(f"{client.url}/v1/models does not answer: is this an "
                                    "OpenAI-compatible server?")
        return model_fields(model)

    async def flush_cache(self, client: "ServerClient") -> None:
        """No standard endpoint: nothing is flushed (the adapter's `flush_note` says so)."""


def _usage(usage: Any, request_id: str) -> tuple[int, int | None]:
    """(cached prompt tokens, prompt tokens). Servers that do not report cached tokens
    (`usage.prompt_tokens_details.cached_tokens`) count as 0 hits."""
    if not isinstance(usage, dict):
        raise fail(request_id, f"usage is {usage!r}")
    prompt = usage.get("prompt_tokens")
    prompt_tokens = None if prompt is None else count(prompt, request_id, "usage.prompt_tokens")
    details = usage.get("prompt_tokens_details")
    if details is None:
        return 0, prompt_tokens
    if not isinstance(details, dict):
        raise fail(request_id, f"usage.prompt_tokens_details is {details!r}")
    cached = details.get("cached_tokens")
    if cached is None:
        return 0, prompt_tokens
    return count(cached, request_id, "usage.prompt_tokens_details.cached_tokens"), prompt_tokens


def _text_id(text: Any, request_id: str, where: str, vocab_size: int | None) -> int:
    """`token_id:N` -> N; plain token text is refused (ids cannot be recovered from text)."""
    if not isinstance(text, str) or not text.startswith(ID_PREFIX):
        raise fail(request_id, f"{where} is {text!r}: the server returns token text, not ids, and "
                               "ids cannot be recovered exactly from text (vLLM: it needs "
                               "return_tokens_as_token_ids; otherwise use the server's native API)")
    digits = text[len(ID_PREFIX):]
    if not digits.isdigit() or not digits.isascii() or len(digits) > 12:  # past int32 anyway
        raise fail(request_id, f"{where} is {text[:40]!r}, not token_id:N with N < 2^31")
    return token_id(int(digits), request_id, where, vocab_size)


def _classic(lps: dict[str, Any], request_id: str, n: int, top_k: int, vocab_size: int | None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    tokens, values = lps.get("tokens"), lps.get("token_logprobs")
    for key, seq in (("tokens", tokens), ("token_logprobs", values)):
        if not isinstance(seq, list) or len(seq) != n:
            got = len(seq) if isinstance(seq, list) else seq
            raise fail(request_id, f"choices[0].logprobs.{key} has {got!r} entries for {n} output tokens")
    assert isinstance(tokens, list) and isinstance(values, list)
    ids = np.array([_text_id(t, request_id, f"logprobs.tokens[{i}]", vocab_size)
                    for i, t in enumerate(tokens)], dtype=np.int32)
    lp = np.array([logprob(v, request_id, f"logprobs.token_logprobs[{i}]")
                   for i, v in enumerate(values)], dtype=np.float64)
    if not top_k:
        return ids, lp, None, None
    rows = lps.get("top_logprobs")
    if not isinstance(rows, list) or len(rows) != n:
        got = len(rows) if isinstance(rows, list) else rows
        raise fail(request_id, f"choices[0].logprobs.top_logprobs has {got!r} rows for {n} output tokens")
    width = top_width(top_k, vocab_size)
    top_ids = np.full((n, top_k), -1, dtype=np.int32)
    top_lps = np.full((n, top_k), np.nan, dtype=np.float64)
    for i, row in enumerate(rows):
        pairs = _classic_top(row, request_id, f"logprobs.top_logprobs[{i}]", int(ids[i]), width, vocab_size)
        for j, (tok, v) in enumerate(pairs):
            top_ids[i, j], top_lps[i, j] = tok, v
    return ids, lp, top_ids, top_lps


def _classic_top(row: Any, request_id: str, where: str, chosen: int, width: int,
                 vocab_size: int | None) -> list[tuple[int, float]]:
    """One {`token_id:N`: logprob} map as exactly `width` pairs. vLLM adds the chosen token when it
    is not among the top k (width + 1 entries): it is dropped, and only when it is the smallest."""
    if not isinstance(row, dict):
        raise fail(request_id, f"{where} is {row!r}, not an object")
    pairs = [(_text_id(t, request_id, f"{where} key", vocab_size), logprob(v, request_id, f"{where}[{t!r}]"))
             for t, v in row.items()]
    if len({t for t, _ in pairs}) != len(pairs):
        raise fail(request_id, f"{where} lists a token twice")
    if len(pairs) == width + 1:
        extra = [p for p in pairs if p[0] == chosen]
        if not extra or extra[0][1] > min(v for _, v in pairs):
            raise fail(request_id, f"{where} has {len(pairs)} entries, expected {width}")
        pairs.remove(extra[0])
    if len(pairs) != width:
        raise fail(request_id, f"{where} has {len(pairs)} entries, expected {width}")
    return pairs
