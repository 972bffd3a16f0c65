"""The engine's HTTP face: SGLang's /generate shapes, its 400s, the info endpoints, lifecycle."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from dataclasses import replace

import pytest

from replay.engine.server import start_server
from tests.unit.engine.test_exactness import HICACHE, cold, model, prompts


def call(url: str, path: str, body: object = None, method: str | None = None) -> tuple[int, str]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(url + path, data, {"Content-Type": "application/json"},
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def body(ids: list, n: int = 2, **extra: object) -> dict:
    return {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": n,
                                                  "ignore_eos": True},
            "return_logprob": True, "logprob_start_len": -1, "top_logprobs_num": 3,
            "return_text_in_logprobs": False, **extra}


@pytest.fixture(scope="module")
def server():
    with start_server(HICACHE, model()) as running:
        yield running


def test_generate_single_returns_sglang_response_shape(server):
    status, text = call(server.url, "/generate", body(prompts()["A"], 6))
    assert status == 200
    out = json.loads(text)
    meta = out["meta_info"]
    reference = cold()["A"]
    assert out["text"] == "" and out["output_ids"] == list(reference.ids)
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (21, 6)
    assert meta["cached_tokens"] == 0
    assert meta["cached_tokens_details"] is None  # SGLang: null when nothing was cached
    assert meta["output_token_logprobs"] == [[lp, t, None] for lp, t in zip(reference.logprobs, reference.ids)]
    assert meta["output_token_logprobs_length"] == 6
    assert [[e[1] for e in row] for row in meta["output_top_logprobs"]] == [list(i) for i, _ in reference.top]
    assert meta["input_token_logprobs"] == [] and meta["input_top_logprobs"] == []  # start -1
    assert isinstance(meta["id"], str) and meta["e2e_latency"] >= 0
    assert (meta["num_retractions"], meta["reasoning_tokens"], meta["weight_version"]) == (0, 0, "default")
    assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": 6}]
    assert meta["response_sent_to_client_ts"] > 0


def test_cached_tokens_details_splits_a_hit_by_tier(server):
    ids = prompts()["A"] + [11] * 8
    call(server.url, "/generate", body(ids, 1))
    meta = json.loads(call(server.url, "/generate", body(ids, 1))[1])["meta_info"]
    assert meta["cached_tokens"] > 0
    assert set(meta["cached_tokens_details"]) == {"device", "host"}  # no storage backend attached
    assert sum(meta["cached_tokens_details"].values()) == meta["cached_tokens"]


def test_generate_ignores_a_top_level_field_sglang_does_not_know(server):
    status, text = call(server.url, "/generate", {**body([1, 2, 3]), "my_client_tag": 7})
    assert status == 200 and len(json.loads(text)["output_ids"]) == 2


def test_generate_batched_returns_a_list_in_submission_order(server):
    ids = [[5, 6, 7], [9, 8], [5, 6, 7]]
    sampling = [{"max_new_tokens": n, "temperature": 0} for n in (2, 3, 1)]
    status, text = call(server.url, "/generate", {"input_ids": ids, "sampling_params": sampling,
                                                  "return_logprob": True})
    assert status == 200
    outs = json.loads(text)
    assert [len(o["output_ids"]) for o in outs] == [2, 3, 1]
    assert outs[2]["output_ids"] == outs[0]["output_ids"][:1]
    assert "output_top_logprobs" not in outs[0]["meta_info"]  # top_logprobs_num defaults to 0
    status, single = call(server.url, "/generate", {"input_ids": [9, 8], "sampling_params":
                                                    sampling[1], "return_logprob": True})
    assert json.loads(single)["meta_info"]["output_token_logprobs"] == \
        outs[1]["meta_info"]["output_token_logprobs"]


@pytest.mark.parametrize("bad, message", [
    ({"stream": True}, "stream"),
    ({"text": "hello"}, "text"),
    ({"sampling_params": {"stop": ["x"]}}, "stop"),
    ({"sampling_params": {"frequency_penalty": 0.5}}, "frequency_penalty"),
    ({"sampling_params": {"no_such_key": 1}}, "unknown field `no_such_key`"),
    ({"sampling_params": {"temperature": -1}}, "temperature"),
    ({"sampling_params": {"top_p": 0}}, "top_p"),
    ({"sampling_params": {"top_k": 0}}, "top_k"),
    ({"sampling_params": {"min_p": 2}}, "min_p"),
    ({"sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
    ({"logprob_start_len": 3}, "logprob_start_len"),
    ({"logprob_start_len": -2}, "logprob_start_len"),
    ({"input_ids": [1, 4096]}, "token ids"),
    ({"input_ids": [-1]}, "token ids"),
    ({"input_ids": []}, "input_ids"),
    ({"top_logprobs_num": -1}, "top_logprobs_num"),
    ({"input_ids": [[1, 2], [3]], "sampling_params": [{"max_new_tokens": 1}]}, "entries"),
])
def test_generate_rejects_what_the_engine_cannot_honour(server, bad, message):
    status, text = call(server.url, "/generate", {**body([1, 2, 3]), **bad})
    assert status == 400
    assert message in json.loads(text)["error"]  # SGLang's contract gate: {"error": "<text>"}


def test_generate_accepts_neutral_penalties(server):
    neutral = {"frequency_penalty": 0.0, "presence_penalty": 0, "repetition_penalty": 1.0,
               "min_new_tokens": 0, "n": 1, "temperature": 0, "max_new_tokens": 2}
    status, text = call(server.url, "/generate", {**body([1, 2, 3]), "sampling_params": neutral})
    assert status == 200 and len(json.loads(text)["output_ids"]) == 2


def test_generate_rejects_a_body_that_is_not_json(server):
    status, text = call(server.url, "/generate", b"{not json")
    assert status == 400 and "error" in json.loads(text)


def test_flush_cache_refuses_while_a_request_runs(server):
    done = threading.Event()
    server.engine.submit([1, 2, 3], 30, 0, lambda _: done.set())  # queued before the flush
    status, text = call(server.url, "/flush_cache", method="POST")
    assert status == 400 and "running or waiting" in text
    assert done.wait(120)
    status, _ = call(server.url, "/flush_cache")
    assert status == 200


def test_flush_cache_empties_the_cache(server):
    ids = prompts()["A"] + [7] * 8
    call(server.url, "/generate", body(ids, 1))
    assert json.loads(call(server.url, "/generate", body(ids, 1))[1])["meta_info"]["cached_tokens"] > 0
    assert call(server.url, "/flush_cache")[0] == 200
    assert json.loads(call(server.url, "/generate", body(ids, 1))[1])["meta_info"]["cached_tokens"] == 0


def test_server_info_reports_the_resolved_settings(server):
    for path in ("/server_info", "/get_server_info"):
        status, text = call(server.url, path)
        assert status == 200
        info = json.loads(text)
        assert info["model_path"] == "embedded/hybrid-tiny@seed0"
        assert (info["page_size"], info["mamba_track_interval"], info["max_total_tokens"]) == (4, 8, 40)
        assert info["enable_hierarchical_cache"] is True and info["disable_radix_cache"] is False
        assert info["hicache_write_policy"] == "write_through"
        assert info["hicache_mem_layout"] == "page_first"
        assert info["enable_deterministic_inference"] is True
        assert info["fault"] is None and info["vocab_size"] == 4096
        assert info["version"] == "golden-replay-engine 0.1.0" and info["internal_states"] == []
        for key in ("hicache_ratio", "hicache_size", "hicache_io_backend", "hicache_storage_backend",
                    "disable_overlap_schedule", "chunked_prefill_size", "launch_command"):
            assert key in info


def test_model_info_describes_the_embedded_hybrid(server):
    for path in ("/model_info", "/get_model_info"):
        status, text = call(server.url, path)
        info = json.loads(text)
        assert status == 200
        assert info["model_path"] == "embedded/hybrid-tiny@seed0"
        assert info["model_type"] == "hybrid" and info["architectures"] == ["GoldenHybridForCausalLM"]
        assert info["tokenizer_path"] is None and info["vocab_size"] == 4096
        assert "served_model_name" in info and "weight_version" in info


def test_health_and_health_generate_answer_200(server):
    assert call(server.url, "/health")[0] == 200
    assert call(server.url, "/health_generate")[0] == 200


def test_start_server_stop_leaves_no_thread_running():
    before = set(threading.enumerate())
    with start_server(replace(HICACHE, hicache_storage_backend="file"), model()) as running:
        assert call(running.url, "/health")[0] == 200
        storage = running.engine.storage.root
    assert set(threading.enumerate()) <= before
    assert not storage.exists()  # the private storage directory went with it
