"""The llama.cpp adapter against answers recorded from a real llama-server.

tests/data/apis/ holds the exact bytes llama-server (build 11434, tiny f32 models) answered to the
bodies this adapter sends (scripts/llamacpp_findings.py capture; INDEX.json names each request).
Strictness: anything the protocol does not promise raises MalformedResponse naming the request.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from replay.server.apis import detect_api, get_api
from replay.server.apis.llamacpp import LlamaCppApi, gguf_identity
from replay.utils.bits import fits_float32
from replay.server.transport import ServerClient
from replay.server.connection import Connection
from replay.utils.errors import MalformedResponse
from tests.support.stub_server import StubServer
from tests.support import paths
from tests.unit.server.apis.conformance import AdapterConformance, Capture

DATA = paths.DATA / "apis"
INDEX = json.loads((DATA / "INDEX.json").read_text())
VOCAB = 768


def load(name: str) -> Any:
    return json.loads((DATA / f"{name}.json").read_text())


def parse(obj: Any, n: int = 6, k: int = 3, vocab: int | None = VOCAB):
    return LlamaCppApi().parse(obj, "g0/b0/t0", max_new_tokens=n, top_k=k, vocab_size=vocab)


def request_of(name: str) -> dict[str, Any]:
    return INDEX[f"{name}.json"]["request"]


MODELS = ["tiny-llama-ascii", "tiny-jamba-ascii"]


# ---------------------------------------------------------------------------------- requests

def test_request_body_is_greedy_fixed_length_id_based():
    path, body = LlamaCppApi(cache_prompt=True).request(np.array([5, 6, 7], np.int32), 9, 4)
    assert path == "/completion"
    assert body["prompt"] == [5, 6, 7] and all(type(t) is int for t in body["prompt"])
    assert body["n_predict"] == 9 and body["n_probs"] == 4
    assert body["temperature"] == 0.0 and body["samplers"] == ["temperature"]
    assert body["ignore_eos"] is True and body["return_tokens"] is True
    assert body["post_sampling_probs"] is False and body["stream"] is False
    assert body["cache_prompt"] is True
    json.dumps(body)  # serialisable as is


def test_top_k_zero_still_asks_for_the_chosen_tokens_logprob():
    _, body = LlamaCppApi().request(np.array([1]), 2, 0)
    assert body["n_probs"] == 1


def test_role_chooses_cache_prompt():
    assert get_api("llamacpp", reference=True).request(np.array([1]), 1, 1)[1]["cache_prompt"] is False
    assert get_api("llamacpp").request(np.array([1]), 1, 1)[1]["cache_prompt"] is True


def test_a_reference_adapter_says_it_bypasses_the_cache():
    assert get_api("llamacpp", reference=True).bypasses_cache is True
    assert get_api("llamacpp").bypasses_cache is False


@pytest.mark.parametrize("model", MODELS)
def test_recorded_requests_are_what_the_adapter_sends(model):
    """The captures were made with the adapter's own bodies (so the recorded answers apply)."""
    prompt = np.array(request_of(f"{model}__completion_reference")["prompt"])
    assert LlamaCppApi(cache_prompt=False).request(prompt, 6, 3)[1] == request_of(f"{model}__completion_reference")


# ---------------------------------------------------------------------------------- parsing

@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", ["completion_reference", "completion_cached_first", "completion_cached_extend"])
def test_parses_recorded_answers_exactly(model, case):
    raw = load(f"{model}__{case}")
    c = parse(raw)
    rows = raw["completion_probabilities"]
    assert c.output_ids.tolist() == raw["tokens"] == [r["id"] for r in rows]
    assert c.logprobs.tolist() == [r["logprob"] for r in rows]  # the printed values, unrounded
    assert c.top_ids.tolist() == [[t["id"] for t in r["top_logprobs"]] for r in rows]
    assert c.top_logprobs.tolist() == [[t["logprob"] for t in r["top_logprobs"]] for r in rows]
    assert c.cached_tokens == raw["timings"]["cache_n"]
    assert c.prompt_tokens == len(request_of(f"{model}__{case}")["prompt"])
    assert c.finish_reason == "length"


@pytest.mark.parametrize("model", MODELS)
def test_recorded_values_are_float32_exactly(model):
    """llama.cpp computes log(p) in float32; nlohmann json writes the widened double with
    round-trip digits, so every parsed value is a float32 bit for bit."""
    for case in ("completion_reference", "completion_cached_extend", "v1_completions"):
        raw = load(f"{model}__{case}")
        rows = raw.get("completion_probabilities") or raw["choices"][0]["logprobs"]["content"]
        values = [r["logprob"] for r in rows] + [t["logprob"] for r in rows for t in r["top_logprobs"]]
        assert np.all(fits_float32(np.array(values)))


@pytest.mark.parametrize("model", MODELS)
def test_reference_answers_report_no_reuse_and_cached_ones_do(model):
    assert parse(load(f"{model}__completion_reference")).cached_tokens == 0
    assert parse(load(f"{model}__completion_cached_extend")).cached_tokens > 0


def test_top_k_zero_keeps_no_top_arrays():
    c = parse(load("tiny-llama-ascii__completion_top0"), k=0)
    assert c.top_ids is None and c.top_logprobs is None and len(c.logprobs) == 6


def test_dropped_rows_of_incomplete_utf8_tokens_are_refused():
    """Real answer: the original tiny vocabulary generated byte tokens (<0xCF>...), and llama.cpp
    left their rows out. The values are lost, so the adapter refuses rather than guess."""
    raw = load("tiny-llama__completion_dropped_rows")
    assert len(raw["completion_probabilities"]) < len(raw["tokens"])
    with pytest.raises(MalformedResponse, match=r"request g0/b0/t0: .*rows for 6 output tokens.*UTF-8"):
        parse(raw)


def test_probabilities_instead_of_logprobs_are_refused():
    with pytest.raises(MalformedResponse, match="probabilities"):
        parse(load("tiny-llama-ascii__completion_post_sampling_probs"))


def _mutated(change) -> dict[str, Any]:
    raw = copy.deepcopy(load("tiny-llama-ascii__completion_reference"))
    change(raw)
    return raw


def _set(path: str, value: Any):
    def change(raw: dict[str, Any]) -> None:
        *head, last = path.split(".")
        target: Any = raw
        for key in head:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is KeyError:
            del target[int(last) if last.isdigit() else last]
        else:
            target[int(last) if last.isdigit() else last] = value
    return change


@pytest.mark.parametrize("path, value, message", [
    ("tokens", KeyError, "tokens is missing"),
    ("tokens", None, "tokens is missing"),
    ("tokens.0", None, r"tokens\[0\] is None"),
    ("tokens.0", 768, "outside the vocabulary"),
    ("tokens.0", -1, "outside the vocabulary"),
    ("tokens.0", True, "not a token id"),
    ("completion_probabilities", KeyError, "not a list of rows"),
    ("completion_probabilities.0.logprob", None, "not a logprob"),
    ("completion_probabilities.0.logprob", "-1.5", "not a logprob"),
    ("completion_probabilities.0.logprob", 0.5, "not a logprob"),
    ("completion_probabilities.0.id", 12, "names token 12"),
    ("completion_probabilities.0.top_logprobs.1.id", 9999, "outside the vocabulary"),
    ("completion_probabilities.0.top_logprobs.1.logprob", None, "not a logprob"),
    ("completion_probabilities.0.top_logprobs", [], "has 0 entries, expected 3"),
    ("completion_probabilities.0.top_logprobs", None, "expected 3"),
    ("timings", KeyError, "timings is missing"),
    ("timings.cache_n", None, "timings.cache_n is None"),
    ("timings.cache_n", -3, "not a count"),
    ("timings.prompt_n", 1.5, "not a count"),
    ("stop_type", None, "stop_type"),
    ("truncated", True, "context was exceeded"),
])
def test_malformed_answers_name_the_request(path, value, message):
    with pytest.raises(MalformedResponse, match=rf"request g0/b0/t0: malformed response: .*{message}"):
        parse(_mutated(_set(path, value)))


def test_duplicate_top_ids_are_refused():
    def dup(raw):
        tops = raw["completion_probabilities"][2]["top_logprobs"]
        tops[2]["id"] = tops[0]["id"]
    with pytest.raises(MalformedResponse, match="lists token .* twice"):
        parse(_mutated(dup))


def test_wrong_length_is_refused():
    with pytest.raises(MalformedResponse, match="6 output tokens, expected exactly 7"):
        parse(load("tiny-llama-ascii__completion_reference"), n=7)
    with pytest.raises(MalformedResponse, match="5 rows for 6"):
        parse(_mutated(lambda raw: raw["completion_probabilities"].pop()))


def test_a_list_answer_is_refused():
    with pytest.raises(MalformedResponse, match="expected a JSON object, got list"):
        parse([load("tiny-llama-ascii__completion_reference")])


def test_vocab_unknown_still_checks_top_width():
    c = parse(load("tiny-llama-ascii__completion_reference"), vocab=None)
    assert c.top_ids.shape == (6, 3)


# ---------------------------------------------------------------------------------- identity

def test_gguf_identity_is_the_file_name():
    assert gguf_identity("/root/.cache/m/tiny-llama-f32.gguf") == "tiny-llama-f32.gguf"
    assert gguf_identity("my-alias") == "my-alias"
    assert gguf_identity("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"


# ------------------------------------------------------------ info, flush, detection (recorded)

class RecordedLlama:
    """Serves the recorded GET/POST answers of one model, with their recorded statuses."""

    def __init__(self, model: str, slot_actions: bool = True) -> None:
        self.model = model
        self.suffix = "enabled" if slot_actions else "disabled"
        self.erased: list[str] = []

    def answer(self, case: str) -> web.Response:
        meta = INDEX[f"{self.model}__{case}.json"]
        return web.Response(status=meta["status"], text=(DATA / f"{self.model}__{case}.json").read_text(),
                            content_type="application/json")

    def app(self) -> web.Application:
        app = web.Application()
        for path, case in (("/props", "props"), ("/v1/models", "v1_models"),
                           ("/server_info", "server_info")):
            app.router.add_get(path, self.handler(case))
        app.router.add_post("/slots/{slot}", self.slots)
        return app

    def handler(self, case: str):
        async def handle(request: web.Request) -> web.Response:
            return self.answer(case)
        return handle

    async def slots(self, request: web.Request) -> web.Response:
        action = request.query.get("action")
        if action == "erase":
            self.erased.append(request.match_info["slot"])
            return self.answer(f"erase_{self.suffix}")
        return self.answer(f"slot_probe_{self.suffix}")


async def _with_server(fake: RecordedLlama, body):
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with ServerClient(f"http://127.0.0.1:{port}") as client:
            return await body(Connection(client, LlamaCppApi()))
    finally:
        await runner.cleanup()


def run_against(fake: RecordedLlama, body):
    return asyncio.run(_with_server(fake, body))


async def _infos(conn):
    return (await detect_api(conn.client), await conn.server_info(), await conn.model_info())


@pytest.mark.parametrize("model", MODELS)
def test_server_and_model_info_from_recorded_answers(model):
    name, info, model_info = run_against(RecordedLlama(model), _infos)
    assert name == "llamacpp"  # /server_info is 404, /props answers
    assert info["total_slots"] == 2 and info["n_ctx"] == 4096
    assert info["cache_prompt"] is True
    assert "disable_radix_cache" not in info  # the adapter's choice is a trait, not a setting
    assert info["slot_actions"] is True and "erase" in LlamaCppApi.flush_note
    assert LlamaCppApi.expect_cache_auto == "none" and "expect_cache_auto" not in info
    assert model_info["model_path"] == f"{model}-f32.gguf"
    assert model_info["model_id"].endswith(f"/{model}-f32.gguf")
    assert model_info["vocab_size"] == VOCAB


def test_server_info_says_when_slots_cannot_be_erased():
    _, info, _ = run_against(RecordedLlama("tiny-llama-ascii", slot_actions=False), _infos)
    assert info["slot_actions"] is False


def test_flush_erases_every_slot():
    fake = RecordedLlama("tiny-llama-ascii")
    run_against(fake, lambda conn: conn.flush_cache())
    assert fake.erased == ["0", "1"]


def test_flush_without_slot_actions_erases_nothing_and_does_not_fail():
    fake = RecordedLlama("tiny-llama-ascii", slot_actions=False)
    run_against(fake, lambda conn: conn.flush_cache())
    assert fake.erased == ["0"]  # asked once, refused with 501: nothing more to try


def test_detect_api_on_the_sglang_stub():
    async def go(url: str) -> str:
        async with ServerClient(url) as client:
            return await detect_api(client)

    with StubServer() as stub:
        assert asyncio.run(go(stub.url)) == "sglang"


# ---------------------------------------------------------------- the adapter conformance suite

def _llamacpp_captures(model: str) -> tuple[Capture, ...]:
    served = tuple(f"{model}__{e}" for e in ("props", "v1_models", "server_info",
                                             "slot_probe_enabled"))
    return tuple(Capture(f"{model}__{a}", k, served) for a, k in (
        ("completion_reference", 3), ("completion_cached_first", 3),
        ("completion_cached_extend", 3), ("completion_top0", 0)))


class TestLlamaCppConformance(AdapterConformance):
    api_name = "llamacpp"
    captures = _llamacpp_captures("tiny-llama-ascii") + _llamacpp_captures("tiny-jamba-ascii")
    vocab_size = VOCAB

    def sent(self, body: dict[str, Any]) -> tuple[np.ndarray, int, bool]:
        return np.array(body["prompt"], np.int32), body["n_predict"], not body["cache_prompt"]
