"""Prompt logprobs (`logprob_start_len` >= 0) as SGLang 0.5.23 returns them, exact like the rest:
a prefill scores each prompt token with the bits a decode gave it, reuse is capped at the start
position, and the response carries SGLang's shapes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from replay.engine.engine import LLMEngine
from replay.engine.server import start_server
from tests.unit.engine.test_exactness import HICACHE, NEW_A, REFERENCE, TOP_K, cold, model, prompts
from tests.unit.engine.test_http import call


@pytest.fixture(scope="module")
def reference():
    engine = LLMEngine(REFERENCE, model())
    yield engine
    engine.close()


def test_a_prefill_scores_each_decoded_token_with_its_decode_logprob(reference):
    a = cold()["A"]
    conversation = prompts()["A"] + list(a.ids)
    seq = reference.generate(conversation, 0, TOP_K, logprob_start_len=0)
    assert len(seq.input_logprobs) == len(conversation) - 1
    assert seq.input_logprobs[-NEW_A:] == list(a.logprobs)
    assert seq.input_top[-NEW_A:] == [(list(i), list(v)) for i, v in a.top]


def test_prompt_logprobs_do_not_depend_on_chunking_or_the_start(reference):
    ids = prompts()["B"]
    whole = reference.generate(ids, 1, logprob_start_len=0).input_logprobs
    engine = LLMEngine(replace(HICACHE, chunked_prefill_size=5), model())
    try:
        chunked = engine.generate(ids, 1, logprob_start_len=0).input_logprobs
        tail = engine.generate(ids, 1, logprob_start_len=10).input_logprobs
    finally:
        engine.close()
    assert chunked == whole and tail == whole[10:]


def test_asking_for_prompt_logprobs_caps_prefix_reuse_at_the_start_position():
    a, b = prompts()["A"], prompts()["B"]
    engine = LLMEngine(HICACHE, model())
    try:
        engine.generate(a, NEW_A)  # caches A: B could reuse 24 tokens
        from_zero = engine.generate(b, 1, logprob_start_len=0)
        from_17 = engine.generate(b, 1, logprob_start_len=17)
        output_only = engine.generate(b, 1)
    finally:
        engine.close()
    assert from_zero.reused == 0  # nothing may be reused before position 0
    assert from_17.reused == 16  # at most 17, on a track boundary (interval 8)
    assert output_only.reused == 24
    assert from_17.input_logprobs == from_zero.input_logprobs[17:]


def test_a_prefill_only_request_returns_no_tokens_and_caches_its_prompt():
    ids = prompts()["C"] + [7] * 3
    engine = LLMEngine(HICACHE, model())
    try:
        seq = engine.generate(ids, 0)
        again = engine.generate(ids + [9, 9], 1)
    finally:
        engine.close()
    assert seq.error is None and seq.output_ids == []
    assert again.reused == 24  # the whole prompt's pages and checkpoints were kept


def test_http_response_has_sglangs_input_logprob_shapes():
    ids = prompts()["A"]
    body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": 0},
            "return_logprob": True, "logprob_start_len": 5, "top_logprobs_num": 2}
    with start_server(HICACHE, model()) as server:
        status, text = call(server.url, "/generate", body)
    assert status == 200
    out = json.loads(text)
    meta = out["meta_info"]
    assert out["output_ids"] == [] and meta["finish_reason"] == {"type": "length", "length": 0}
    entries = meta["input_token_logprobs"]
    assert len(entries) == len(ids) - 5
    assert entries[0] == [None, ids[5], None]  # nothing before the start position was scored
    assert [e[1] for e in entries] == ids[5:] and all(isinstance(e[0], float) for e in entries[1:])
    tops = meta["input_top_logprobs"]
    assert tops[0] is None and len(tops) == len(entries)
    assert all(len(row) == 2 and row[0][0] >= row[1][0] for row in tops[1:])
    assert meta["output_token_logprobs"] == [] and meta["output_token_logprobs_length"] == 0
