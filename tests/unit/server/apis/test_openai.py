"""The OpenAI-compatible adapter: llama.cpp's /v1/completions answers recorded from a real
llama-server (tests/data/apis/, see test_apis_llamacpp.py), and the classic OpenAI logprobs shape.

The classic-shape answers below are SYNTHETIC (written here after vLLM's documented format with
`return_tokens_as_token_ids`); no vLLM server was run to record them.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from replay.server.apis import get_api
from replay.server.apis.llamacpp import LlamaCppApi
from replay.server.apis.openai import OpenAIApi
from replay.server.connection import connect
from replay.utils.errors import MalformedResponse
from tests.support import paths
from tests.unit.server.apis.conformance import AdapterConformance, Capture

DATA = paths.DATA / "apis"
INDEX = json.loads((DATA / "INDEX.json").read_text())
VOCAB = 768
MODELS = ["tiny-llama-ascii", "tiny-jamba-ascii"]


def load(name: str) -> Any:
    return json.loads((DATA / f"{name}.json").read_text())


def parse(obj: Any, n: int = 6, k: int = 3, vocab: int | None = VOCAB):
    return OpenAIApi().parse(obj, "g1/b0/t2", max_new_tokens=n, top_k=k, vocab_size=vocab)


# ---------------------------------------------------------------------------------- requests

def test_request_body():
    api = OpenAIApi()
    path, body = api.request(np.array([7, 8], np.int32), 5, 3)
    assert path == "/v1/completions"
    assert body["prompt"] == [7, 8] and all(type(t) is int for t in body["prompt"])
    assert body["max_tokens"] == 5 and body["min_tokens"] == 5 and body["ignore_eos"] is True
    assert body["temperature"] == 0 and body["logprobs"] == 3 and body["n"] == 1
    assert body["echo"] is False and body["stream"] is False
    assert body["return_tokens_as_token_ids"] is True
    assert "model" not in body and "cache_prompt" not in body
    api.model_id = "m"
    assert api.request(np.array([1]), 1, 0)[1]["model"] == "m"
    assert api.request(np.array([1]), 1, 0)[1]["logprobs"] == 1  # the chosen token's value


def test_reference_role_turns_llamacpp_reuse_off():
    assert get_api("openai", reference=True).request(np.array([1]), 1, 1)[1]["cache_prompt"] is False


# ------------------------------------------------------------- llama.cpp's shape (recorded)

@pytest.mark.parametrize("model", MODELS)
def test_parses_recorded_llamacpp_answers(model):
    raw = load(f"{model}__v1_completions")
    c = parse(raw)
    rows = raw["choices"][0]["logprobs"]["content"]
    assert c.output_ids.tolist() == [r["id"] for r in rows]
    assert c.logprobs.tolist() == [r["logprob"] for r in rows]
    assert c.top_logprobs.tolist() == [[t["logprob"] for t in r["top_logprobs"]] for r in rows]
    assert c.cached_tokens == 0 and c.prompt_tokens == 40 and c.finish_reason == "length"


@pytest.mark.parametrize("model", MODELS)
def test_same_values_as_the_native_api(model):
    """One server, one prompt, both endpoints (reference role): the same ids and bits."""
    a = parse(load(f"{model}__v1_completions"))
    b = LlamaCppApi().parse(load(f"{model}__completion_reference"), "x", max_new_tokens=6,
                            top_k=3, vocab_size=VOCAB)
    for x, y in ((a.output_ids, b.output_ids), (a.top_ids, b.top_ids)):
        assert np.array_equal(x, y)
    for x, y in ((a.logprobs, b.logprobs), (a.top_logprobs, b.top_logprobs)):
        assert np.array_equal(x.view(np.uint64), y.view(np.uint64))


def test_dropped_rows_are_refused():
    with pytest.raises(MalformedResponse, match=r"request g1/b0/t2: .*content has \d rows for 6 output tokens"):
        parse(load("tiny-llama__v1_completions_dropped_rows"))


def _llama(change) -> dict[str, Any]:
    raw = copy.deepcopy(load("tiny-llama-ascii__v1_completions"))
    change(raw)
    return raw


@pytest.mark.parametrize("change, message", [
    (lambda r: r.update(choices=[]), "exactly one choice"),
    (lambda r: r["choices"].append(r["choices"][0]), "exactly one choice"),
    (lambda r: r["choices"][0].update(logprobs=None), "logprobs is None"),
    (lambda r: r["choices"][0].update(logprobs={}), "neither content nor tokens"),
    (lambda r: r["choices"][0].update(finish_reason=None), "finish_reason"),
    (lambda r: r["choices"][0]["logprobs"]["content"][1].update(id=5000), "outside the vocabulary"),
    (lambda r: r["choices"][0]["logprobs"]["content"][1].update(logprob=None), "not a logprob"),
    (lambda r: r["choices"][0]["logprobs"]["content"][1]["top_logprobs"].pop(), "2 entries, expected 3"),
    (lambda r: r.pop("usage"), "usage is None"),
    (lambda r: r["usage"]["prompt_tokens_details"].update(cached_tokens=-1), "not a count"),
    (lambda r: r["usage"].update(prompt_tokens_details=7), "prompt_tokens_details is 7"),
])
def test_malformed_llamacpp_shape(change, message):
    with pytest.raises(MalformedResponse, match=rf"request g1/b0/t2: malformed response: .*{message}"):
        parse(_llama(change))


def test_cached_tokens_from_usage_and_missing_means_zero():
    assert parse(_llama(lambda r: r["usage"]["prompt_tokens_details"].update(cached_tokens=33))).cached_tokens == 33
    assert parse(_llama(lambda r: r["usage"].pop("prompt_tokens_details"))).cached_tokens == 0


# ------------------------------------------------------------------ classic shape (SYNTHETIC)

def classic(tokens: list[str], values: list[float], tops: list[dict[str, float]] | None,
            cached: int | None = 17) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": 40, "completion_tokens": len(tokens)}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"choices": [{"index": 0, "text": "", "finish_reason": "length",
                         "logprobs": {"tokens": tokens, "token_logprobs": values,
                                      "top_logprobs": tops, "text_offset": [0] * len(tokens)}}],
            "usage": usage}


IDS = ["token_id:10", "token_id:11"]
VALS = [-0.5, -1.25]
TOPS = [{"token_id:10": -0.5, "token_id:3": -2.0}, {"token_id:11": -1.25, "token_id:4": -1.5}]


def test_classic_shape_with_token_ids():
    c = parse(classic(IDS, VALS, TOPS), n=2, k=2)
    assert c.output_ids.tolist() == [10, 11] and c.logprobs.tolist() == VALS
    assert c.top_ids.tolist() == [[10, 3], [11, 4]]
    assert c.top_logprobs.tolist() == [[-0.5, -2.0], [-1.25, -1.5]]
    assert c.cached_tokens == 17


def test_classic_shape_drops_the_extra_chosen_token_only_when_smallest():
    tops = [{"token_id:3": -0.1, "token_id:4": -0.2, "token_id:10": -0.5}, TOPS[1]]
    c = parse(classic(IDS, VALS, tops), n=2, k=2)
    assert c.top_ids.tolist()[0] == [3, 4]
    bad = [{"token_id:3": -0.9, "token_id:4": -0.2, "token_id:10": -0.5}, TOPS[1]]
    with pytest.raises(MalformedResponse, match="3 entries, expected 2"):
        parse(classic(IDS, VALS, bad), n=2, k=2)


def test_classic_shape_with_text_tokens_is_refused():
    with pytest.raises(MalformedResponse, match="token text, not ids"):
        parse(classic(["Hello", " world"], VALS, None), n=2, k=0)


@pytest.mark.parametrize("tokens, values, tops, message", [
    (["token_id:10"], VALS, TOPS, "tokens has 1 entries for 2"),
    (IDS, [-0.5], TOPS, "token_logprobs has 1 entries for 2"),
    (IDS, [-0.5, None], TOPS, "not a logprob"),
    (["token_id:10", "token_id:x1"], VALS, TOPS, "not token_id:N"),
    (["token_id:10", "token_id:900"], VALS, TOPS, "outside the vocabulary"),
    (IDS, VALS, None, "top_logprobs has None rows"),
    (IDS, VALS, [TOPS[0]], "top_logprobs has 1 rows"),
    (IDS, VALS, [TOPS[0], {"token_id:11": -1.25}], "1 entries, expected 2"),
    (IDS, VALS, [TOPS[0], {"Hello": -1.25, "token_id:4": -1.5}], "token text, not ids"),
])
def test_classic_shape_malformed(tokens, values, tops, message):
    with pytest.raises(MalformedResponse, match=rf"request g1/b0/t2: malformed response: .*{message}"):
        parse(classic(tokens, values, tops), n=2, k=2)


# ---------------------------------------------------------------- info and flush (recorded)

async def _infos(url: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    async with connect(url, api="openai") as conn:  # prepares the adapter (SupportsPrepare)
        info = await conn.server_info()
        model = await conn.model_info()
        await conn.flush_cache()
        return info, model, conn.api.request(np.array([1]), 1, 1)[1]


def test_info_from_recorded_v1_models():
    text = (DATA / "tiny-llama-ascii__v1_models.json").read_text()

    async def models(request: web.Request) -> web.Response:
        return web.Response(text=text, content_type="application/json")

    async def go():
        app = web.Application()
        app.router.add_get("/v1/models", models)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            return await _infos(f"http://127.0.0.1:{port}")
        finally:
            await runner.cleanup()

    info, model, body = asyncio.run(go())
    assert "expect_cache_auto" not in info and OpenAIApi.flush_note.startswith("none")
    assert info["served_models"] == [json.loads(text)["data"][0]["id"]]
    assert model["model_path"] == "tiny-llama-ascii-f32.gguf" and model["vocab_size"] == VOCAB
    assert body["model"] == json.loads(text)["data"][0]["id"]  # learned from /v1/models by connect


# ---------------------------------------------------------------- the adapter conformance suite

class TestOpenAIConformance(AdapterConformance):
    """Against llama.cpp's /v1/completions (the server the captures came from)."""

    api_name = "openai"
    captures = tuple(Capture(f"{m}__v1_completions", 3, (f"{m}__v1_models",)) for m in MODELS)
    vocab_size = VOCAB
    learned_keys = frozenset({"model"})  # the served model's id, learned by `prepare`

    def sent(self, body: dict[str, Any]) -> tuple[np.ndarray, int, bool]:
        return np.array(body["prompt"], np.int32), body["max_tokens"], "cache_prompt" in body
