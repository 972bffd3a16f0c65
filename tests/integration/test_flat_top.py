"""SGLang's flat base64 top-k end to end: the embedded engine serves both forms over real HTTP,
the client asks for the flat one, and the parsed float32 bits are identical whichever form
came back."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import numpy as np
import pytest

from replay.utils import aio
from replay.server.apis.sglang import SGLangApi, generate_body, parse_completion
from replay.server.connection import connect
from replay.engine.server import start_server
from tests.unit.engine.test_exactness import REFERENCE, draw, model

K = 5
N = 12


@pytest.fixture(scope="module")
def server():
    with start_server(REFERENCE, model()) as running:
        yield running


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url + "/generate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def nested_body(ids: np.ndarray) -> dict[str, Any]:
    body = generate_body(ids, N, K)
    del body["return_flat_raw_output_top_logprobs"], body["return_flat_raw_top_logprobs_b64"]
    return body


def prompt(seed: int) -> np.ndarray:
    return np.array(draw(seed, 17), dtype=np.int32)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a.view(np.uint64), b.view(np.uint64))


def test_engine_answers_the_flat_request_with_base64_arrays(server):
    meta = post(server.url, generate_body(prompt(1), N, K))["meta_info"]
    assert "output_top_logprobs" not in meta
    assert meta["output_top_logprobs_shape"] == [N, K]
    assert meta["output_top_logprobs_null_prefix"] == 0
    assert meta["output_top_logprobs_val_flat_b64_dtype"] == "float32"
    assert meta["output_top_logprobs_idx_flat_b64_dtype"] == "int32"


def test_engine_answers_a_request_without_the_flags_with_nested_lists(server):
    meta = post(server.url, nested_body(prompt(1)))["meta_info"]
    assert len(meta["output_top_logprobs"]) == N and "output_top_logprobs_shape" not in meta


@pytest.mark.parametrize("b64", [True, False])
def test_flat_and_nested_forms_give_identical_bits(server, b64):
    for seed in (1, 2, 3):
        flat_body = generate_body(prompt(seed), N, K)
        flat_body["return_flat_raw_top_logprobs_b64"] = b64
        flat = parse_completion(post(server.url, flat_body), "flat", max_new_tokens=N, top_k=K)
        nested = parse_completion(post(server.url, nested_body(prompt(seed))), "nested",
                                  max_new_tokens=N, top_k=K)
        assert np.array_equal(flat.output_ids, nested.output_ids)
        assert np.array_equal(flat.top_ids, nested.top_ids)
        assert same_bits(flat.top_logprobs, nested.top_logprobs)
        assert same_bits(flat.logprobs, nested.logprobs)


def test_engine_refuses_b64_without_the_flat_flag(server):
    body = nested_body(prompt(1))
    body["return_flat_raw_top_logprobs_b64"] = True
    request = urllib.request.Request(server.url + "/generate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=120)
    assert err.value.code == 400


def test_the_client_connection_reads_the_flat_answer(server):
    async def complete() -> Any:
        async with connect(server.url, api="sglang") as conn:
            assert isinstance(conn.api, SGLangApi)
            return await conn.complete(prompt(2), "g0/b0/t0", max_new_tokens=N, top_k=K,
                                       vocab_size=None)

    got = aio.run(complete())
    want = parse_completion(post(server.url, nested_body(prompt(2))), "n", max_new_tokens=N,
                            top_k=K)
    assert np.array_equal(got.top_ids, want.top_ids)
    assert same_bits(got.top_logprobs, want.top_logprobs)
