"""What every API adapter must do, as one suite each adapter's test module subclasses (as
zarr-python's store tests do): `class TestLlamaCppConformance(AdapterConformance)` with the
answers its real server gave (tests/data/apis/, INDEX.json names the request of each).

A subclass names its adapter (`api_name`), its captured answers (`captures`: the answer file,
the top-k asked, and the captured GET answers a recorded server replays beside it) and how a
captured request body reads back (`sent`: input ids, max_new_tokens, reference role). The suite
checks the adapter against the `Api` protocol and its optional `Supports*` capabilities: the
request it builds is the one that was answered, each answer parses into a sound `Completion`
(and the fast path, where there is one, agrees bit for bit), anything broken is refused naming
the request, and its traits are attributes, never keys in the server's settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest
from aiohttp import web

from replay.server.apis import API_NAMES, detect_api, get_api
from replay.server.apis.base import Api, Completion, SupportsFastParse
from replay.server.connection import connect
from replay.server.transport import ServerClient
from replay.utils.bits import fits_float32
from replay.utils.errors import MalformedResponse
from tests.support import paths

DATA = paths.DATA / "apis"
INDEX: dict[str, Any] = json.loads((DATA / "INDEX.json").read_text())
REQUEST_ID = "g0/b1/t2"
TRAITS = ("expect_cache_auto", "flush_note", "bypasses_cache")


@dataclass(frozen=True)
class Capture:
    answer: str  # a file of tests/data/apis/ (without .json): what the server answered
    top_k: int  # the top-k the request asked for
    served: tuple[str, ...] = ()  # captured GET answers of the same server (its info endpoints)

    @property
    def request(self) -> dict[str, Any]:
        return INDEX[f"{self.answer}.json"]["request"]

    @property
    def text(self) -> str:
        return (DATA / f"{self.answer}.json").read_text()

    @property
    def obj(self) -> Any:
        return json.loads(self.text)


@contextlib.asynccontextmanager
async def recorded_server(files: tuple[str, ...]) -> AsyncIterator[str]:
    """A server that answers each captured exchange (INDEX.json's `endpoint`) with its bytes and
    status, and 404 to anything else."""
    answers = {INDEX[f"{f}.json"]["endpoint"]: (INDEX[f"{f}.json"]["status"],
                                                (DATA / f"{f}.json").read_bytes()) for f in files}

    async def answer(request: web.Request) -> web.Response:
        status, body = answers.get(f"{request.method} {request.path_qs}", (404, b"{}"))
        return web.Response(status=status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


class AdapterConformance:
    api_name: ClassVar[str]
    captures: ClassVar[tuple[Capture, ...]]
    vocab_size: ClassVar[int | None]
    # Request keys the adapter learns from the server (`SupportsPrepare`), absent before.
    learned_keys: ClassVar[frozenset[str]] = frozenset()
    # Request keys whose value is fresh on every request (vLLM's per-request `cache_salt` of a
    # reference): present exactly when the captured request has them, values not compared.
    fresh_keys: ClassVar[frozenset[str]] = frozenset()
    # Settings keys the adapter states under SGLang's name from a setting of the server's own
    # (vLLM's `disable_radix_cache` from `enable_prefix_caching`): SGLang key -> the server's.
    derived_keys: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Each subclass's tests run once per capture (the `capture` fixture)."""
        super().__init_subclass__(**kwargs)
        captures = cls.__dict__.get("captures")
        if captures:
            @pytest.fixture(params=captures, ids=[c.answer for c in captures])
            def capture(self: Any, request: pytest.FixtureRequest) -> Capture:
                return request.param

            cls.capture = capture  # type: ignore[attr-defined]

    def sent(self, body: dict[str, Any]) -> tuple[np.ndarray, int, bool]:
        """(input ids, max_new_tokens, reference role) of a captured request body."""
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers

    def comparable(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body with each fresh key's value replaced by a mark that it is there."""
        return {k: ("<fresh>" if k in self.fresh_keys else v) for k, v in body.items()}

    def adapter(self, *, reference: bool = False) -> Api:
        return get_api(self.api_name, reference=reference)

    def parse(self, capture: Capture, obj: Any = None, *, n: int | None = None,
              vocab_size: int | None = -1) -> Completion:
        _, sent_n, reference = self.sent(capture.request)
        return self.adapter(reference=reference).parse(
            capture.obj if obj is None else obj, REQUEST_ID,
            max_new_tokens=sent_n if n is None else n, top_k=capture.top_k,
            vocab_size=self.vocab_size if vocab_size == -1 else vocab_size)

    # ------------------------------------------------------------------ the protocol and traits

    def test_is_an_api_by_protocol(self):
        for reference in (False, True):
            assert isinstance(self.adapter(reference=reference), Api)

    def test_its_name_gives_it(self):
        assert self.api_name in API_NAMES and self.adapter().name == self.api_name

    def test_states_its_traits_as_attributes(self):
        api = self.adapter()
        assert api.expect_cache_auto in (None, "none", "any")
        assert isinstance(api.flush_note, str) and api.flush_note
        assert isinstance(api.bypasses_cache, bool)

    # ------------------------------------------------------------------ requests

    def test_a_fresh_adapter_builds_a_request_before_any_server_call(self, capture):
        ids, n, reference = self.sent(capture.request)
        path, body = self.adapter(reference=reference).request(ids, n, capture.top_k)
        assert path.startswith("/") and json.loads(json.dumps(body)) == body
        expected = {k: v for k, v in capture.request.items() if k not in self.learned_keys}
        assert self.comparable(body) == self.comparable(expected)

    def test_a_connected_adapter_builds_exactly_the_captured_request(self, capture):
        ids, n, reference = self.sent(capture.request)

        async def go() -> tuple[str, dict[str, Any]]:
            async with recorded_server(capture.served) as url, \
                    connect(url, api=self.api_name, reference=reference) as conn:
                return conn.api.request(ids, n, capture.top_k)

        path, body = asyncio.run(go())
        assert f"POST {path}" == INDEX[f"{capture.answer}.json"]["endpoint"]
        assert self.comparable(body) == self.comparable(capture.request)

    # ------------------------------------------------------------------ answers

    def test_parses_each_captured_answer_into_a_sound_completion(self, capture):
        _, n, _ = self.sent(capture.request)
        c = self.parse(capture)
        assert c.output_ids.dtype == np.int32 and c.output_ids.shape == (n,)
        assert c.logprobs.dtype == np.float64 and c.logprobs.shape == (n,)
        assert np.all(c.logprobs <= 0) and all(fits_float32(float(v)) for v in c.logprobs)
        if capture.top_k:
            assert c.top_ids is not None and c.top_logprobs is not None
            assert c.top_ids.shape == c.top_logprobs.shape == (n, capture.top_k)
            assert np.all(c.top_ids[:, 0] >= 0)
        else:
            assert c.top_ids is None and c.top_logprobs is None
        assert isinstance(c.cached_tokens, int) and c.cached_tokens >= 0

    def test_a_fast_path_if_any_agrees_with_parse_bit_for_bit(self, capture):
        """An adapter has the whole SupportsFastParse capability or none of it (never a
        `parse_text` the connection would not use)."""
        _, n, reference = self.sent(capture.request)
        api = self.adapter(reference=reference)
        if not isinstance(api, SupportsFastParse):
            assert not callable(getattr(api, "parse_text", None))
            return
        fast = api.parse_text(capture.text, REQUEST_ID, max_new_tokens=n, top_k=capture.top_k,
                              vocab_size=self.vocab_size)
        slow = self.parse(capture)
        for name in ("output_ids", "logprobs", "top_ids", "top_logprobs"):
            a, b = getattr(fast, name), getattr(slow, name)
            assert (a is None and b is None) or (a.tobytes() == b.tobytes() and a.dtype == b.dtype)
        assert (fast.cached_tokens, fast.cached_details, fast.finish_reason) == \
            (slow.cached_tokens, slow.cached_details, slow.finish_reason)

    def test_refuses_a_non_object_naming_the_request(self, capture):
        with pytest.raises(MalformedResponse, match=f"request {REQUEST_ID}: malformed response"):
            self.parse(capture, obj=[capture.obj])

    def test_refuses_an_answer_of_another_length(self, capture):
        _, n, _ = self.sent(capture.request)
        with pytest.raises(MalformedResponse, match=f"request {REQUEST_ID}"):
            self.parse(capture, n=n + 1)

    def test_refuses_token_ids_outside_the_vocabulary(self, capture):
        largest = int(self.parse(capture).output_ids.max())
        with pytest.raises(MalformedResponse, match="outside the vocabulary"):
            self.parse(capture, vocab_size=largest)

    def test_refuses_an_answer_with_its_first_logprob_missing(self, capture):
        broken = strip_first_logprob(copy.deepcopy(capture.obj))
        with pytest.raises(MalformedResponse, match=f"request {REQUEST_ID}"):
            self.parse(capture, obj=broken)

    # ------------------------------------------------------------------ the server's own settings

    def test_detects_its_server_and_reads_its_settings_without_traits(self, capture):
        async def go() -> tuple[str, dict[str, Any], dict[str, Any]]:
            async with recorded_server(capture.served) as url:
                async with ServerClient(url) as client:
                    name = await detect_api(client)
                async with connect(url, api=self.api_name) as conn:
                    return name, await conn.server_info(), await conn.model_info()

        name, info, model = asyncio.run(go())
        assert name == self.api_name
        assert not set(TRAITS) & set(info)
        served = "".join((DATA / f"{f}.json").read_text() for f in capture.served)
        said = self.derived_keys.get("disable_radix_cache", "disable_radix_cache")
        assert "disable_radix_cache" not in info or f'"{said}"' in served
        assert isinstance(model["model_path"], str) and model["model_path"]


def strip_first_logprob(obj: Any) -> Any:
    """The answer with the first logprob value taken out, wherever its shape keeps it."""
    if isinstance(obj, dict):
        for key in ("logprob", "output_token_logprobs", "token_logprobs"):
            if key in obj:
                value = obj[key]
                if isinstance(value, list) and value:
                    first = value[0]
                    value[0] = [None, *first[1:]] if isinstance(first, list) else None
                else:
                    obj[key] = None
                return obj
        for value in obj.values():
            if isinstance(value, (dict, list)) and strip_first_logprob(value) is not None:
                return obj
        return None
    if isinstance(obj, list):
        for value in obj:
            if isinstance(value, (dict, list)) and strip_first_logprob(value) is not None:
                return obj
    return None
