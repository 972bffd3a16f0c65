"""The vLLM adapter (`--api vllm`) against answers recorded from a real vLLM 0.32.0 CPU server
(tests/data/apis/vllm/: the tiny Llama of scripts/make_tiny_hf_models.py, served by the
vllm-reference and vllm-prefix-cache profiles; /server_info trimmed to vllm_config and vllm_env),
and the adapter conformance suite on the exchanges scripts/capture_vllm_answers.py captured.
The recorded answers are served by a small aiohttp app, so the adapter's real HTTP path runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from replay.server.apis import detect_api, get_api
from replay.server.apis.base import SupportsHitSources
from replay.server.apis.openai import OpenAIApi
from replay.server.apis.vllm import VllmApi, config_vocab_size, facts_from_config, facts_from_metrics
from replay.server.connection import Connection
from replay.server.transport import ServerClient
from replay.utils.errors import ServerError
from tests.support import paths
from tests.unit.server.apis.conformance import AdapterConformance, Capture

DATA = paths.DATA / "apis" / "vllm"


def text(name: str) -> str:
    return (DATA / name).read_text()


class RecordedVllm:
    """Serves recorded vLLM answers; `dev_mode` False answers 404 to the dev-mode endpoints, as
    vLLM does without VLLM_SERVER_DEV_MODE=1."""

    def __init__(self, *, dev_mode: bool = True, server_info: str = "server_info_reference.json",
                 reset_answers: tuple[bool, ...] = (True,)) -> None:
        self.dev_mode = dev_mode
        self.server_info = server_info
        self.reset_answers = list(reset_answers)
        self.resets: list[str] = []
        self.metrics = text("metrics_prefix_cache.txt")
        self.models = text("v1_models.json")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/server_info", self.info)
        app.router.add_get("/v1/models", self.get_models)
        app.router.add_get("/version", self.json_of("version.json"))
        app.router.add_get("/metrics", self.get_metrics)
        app.router.add_post("/reset_prefix_cache", self.reset)
        return app

    def json_of(self, name: str):
        async def handle(request: web.Request) -> web.Response:
            return web.Response(text=text(name), content_type="application/json")
        return handle

    async def info(self, request: web.Request) -> web.Response:
        if not self.dev_mode:
            return web.Response(status=404, text='{"detail":"Not Found"}')
        return web.Response(text=text(self.server_info), content_type="application/json")

    async def get_models(self, request: web.Request) -> web.Response:
        return web.Response(text=self.models, content_type="application/json")

    async def get_metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics)

    async def reset(self, request: web.Request) -> web.Response:
        if not self.dev_mode:
            return web.Response(status=404, text='{"detail":"Not Found"}')
        self.resets.append(request.query_string)
        ok = self.reset_answers.pop(0) if len(self.reset_answers) > 1 else self.reset_answers[0]
        return web.json_response({"success": ok})


async def _with(fake: RecordedVllm, body, api: Any = None):
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with ServerClient(f"http://127.0.0.1:{port}") as client:
            return await body(Connection(client, api or VllmApi()))
    finally:
        await runner.cleanup()


def run(fake: RecordedVllm, body, api: Any = None):
    return asyncio.run(_with(fake, body, api))


# ---------------------------------------------------------------------------------- requests

def test_a_reference_request_carries_a_fresh_cache_salt_each_time():
    api = get_api("vllm", reference=True)
    salts = {api.request(np.array([5, 6]), 2, 1)[1]["cache_salt"] for _ in range(3)}
    assert len(salts) == 3 and all(s.startswith("golden-ref-") for s in salts)


def test_a_replay_request_carries_no_salt_and_no_llamacpp_switch():
    _, body = get_api("vllm").request(np.array([5, 6]), 2, 1)
    assert "cache_salt" not in body and "cache_prompt" not in body
    assert body["return_tokens_as_token_ids"] is True and body["prompt"] == [5, 6]


def test_the_openai_adapter_sends_no_salt():
    """Salting is vLLM's switch, so it is the vLLM adapter's: `--api openai` stays standard."""
    assert "cache_salt" not in OpenAIApi(reference=True).request(np.array([1]), 1, 1)[1]


def test_a_recorded_answer_parses_with_token_ids_and_cached_tokens():
    c = VllmApi().parse(json.loads(text("completion_hit.json")), "g0/b0/t1", max_new_tokens=8,
                        top_k=3, vocab_size=2048)
    assert len(c.output_ids) == 8 and c.top_ids is not None and c.top_ids.shape == (8, 3)
    assert c.cached_tokens > 0 and c.cached_tokens % 128 == 0


# ---------------------------------------------------------------------------------- facts

def test_server_facts_come_from_the_resolved_config():
    info = facts_from_config(json.loads(text("server_info_reference.json"))["vllm_config"], {})
    assert info["page_size"] == 128 and info["disable_radix_cache"] is True
    assert info["dtype"] == "bfloat16" and info["device"] == "cpu"
    assert info["chunked_prefill_size"] == 16384 and info["tp_size"] == 1
    assert "uses_mamba_radix_cache" not in info


def test_a_hybrids_prefix_cache_expects_states_at_block_boundaries():
    info = facts_from_config(json.loads(text("server_info_qwen3_next.json"))["vllm_config"], {})
    assert info["uses_mamba_radix_cache"] is True
    assert info["mamba_track_interval"] == info["page_size"] == 256


def test_without_dev_mode_the_facts_come_from_metrics():
    info = facts_from_metrics(text("metrics_prefix_cache.txt"))
    assert info == {"page_size": 128, "enable_prefix_caching": True, "disable_radix_cache": False,
                    "kv_cache_dtype": "auto"}


def test_server_info_in_dev_mode_reads_the_config_and_the_version():
    info = run(RecordedVllm(), lambda conn: conn.server_info())
    assert info["page_size"] == 128 and info["vllm_version"] == "0.32.0"


def test_a_reference_bypasses_the_cache_through_its_salts_and_reports_the_server_as_it_is():
    api = VllmApi(reference=True)
    info = run(RecordedVllm(server_info="server_info_prefix_cache.json"),
               lambda conn: conn.server_info(), api)
    assert api.bypasses_cache is True and VllmApi().bypasses_cache is False
    assert info["enable_prefix_caching"] is True and info["disable_radix_cache"] is False


def test_expect_cache_auto_is_decided_from_the_servers_settings():
    api = VllmApi()
    run(RecordedVllm(dev_mode=False), lambda conn: conn.server_info(), api)
    assert api.expect_cache_auto is None  # /metrics said block size and caching


def test_a_server_that_says_nothing_about_its_cache_gets_no_expectation():
    api = VllmApi()
    fake = RecordedVllm(dev_mode=False)
    fake.metrics = ""
    info = run(fake, lambda conn: conn.server_info(), api)
    assert api.expect_cache_auto == "none" and "disable_radix_cache" not in info


def test_model_info_reads_the_vocabulary_from_the_served_folder(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 2048}))
    models = json.loads(text("v1_models.json"))
    models["data"][0]["root"] = str(tmp_path)
    fake = RecordedVllm()
    fake.models = json.dumps(models)
    info = run(fake, lambda conn: conn.model_info())
    assert info["vocab_size"] == 2048 and info["max_model_len"] == 4096


def test_a_nested_text_config_gives_the_vocabulary(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 99}}))
    assert config_vocab_size(str(tmp_path)) == 99
    assert config_vocab_size(str(tmp_path / "absent")) is None


# ---------------------------------------------------------------------------------- flush, tiers

def test_the_flush_resets_the_prefix_cache():
    fake = RecordedVllm()
    run(fake, lambda conn: conn.flush_cache())
    assert fake.resets == [""]


def test_the_flush_also_resets_a_connector_tier():
    fake = RecordedVllm(server_info="server_info_disk_tier.json")

    async def go(conn: Connection) -> None:
        await conn.server_info()
        await conn.flush_cache()

    run(fake, go)
    assert fake.resets == ["reset_external=true"]


def test_the_flush_retries_while_blocks_are_held():
    fake = RecordedVllm(reset_answers=(False, False, True))
    run(fake, lambda conn: conn.flush_cache())
    assert len(fake.resets) == 3


def test_a_flush_that_never_succeeds_is_an_error():
    with pytest.raises(ServerError, match="success=false"):
        run(RecordedVllm(reset_answers=(False,)), lambda conn: conn.flush_cache())


def test_without_dev_mode_the_flush_does_nothing_and_says_so():
    fake = RecordedVllm(dev_mode=False)
    run(fake, lambda conn: conn.flush_cache())
    assert fake.resets == [] and "VLLM_SERVER_DEV_MODE=1" in VllmApi.flush_note


def test_hit_sources_map_vllms_sources_to_tiers():
    assert isinstance(VllmApi(), SupportsHitSources)
    fake = RecordedVllm()
    fake.metrics = fake.metrics.replace('source="disk"} 0.0', 'source="disk"} 256.0')
    tiers = run(fake, lambda conn: conn.hit_sources())
    assert tiers["storage"] == 256 and tiers["device"] > 0 and tiers["host"] == 0


def test_adapters_without_hit_sources_report_none():
    assert run(RecordedVllm(), lambda conn: conn.hit_sources(), OpenAIApi()) is None


# ---------------------------------------------------------------------------------- detection

def test_detection_is_not_fooled_by_vllm_answering_server_info():
    assert run(RecordedVllm(), lambda conn: detect_api(conn.client)) == "vllm"


def test_detection_knows_vllm_without_dev_mode_by_its_models_list():
    assert run(RecordedVllm(dev_mode=False), lambda conn: detect_api(conn.client)) == "vllm"


# ---------------------------------------------------------------- the adapter conformance suite

SERVED = ("vllm-tiny-llama__server_info", "vllm-tiny-llama__v1_models", "vllm-tiny-llama__version")


class TestVllmConformance(AdapterConformance):
    """Against vLLM 0.32.0's CPU server (vllm-prefix-cache serving the tiny Llama; captured by
    scripts/capture_vllm_answers.py): a salted reference, a first turn, its extension that hit
    three cached blocks, and the extension with top-0."""

    api_name = "vllm"
    captures = tuple(Capture(f"vllm-tiny-llama__{name}", top_k, SERVED) for name, top_k in (
        ("completion_reference", 3), ("completion_first", 3), ("completion_cached_extend", 3),
        ("completion_top0", 0)))
    vocab_size = 2048
    learned_keys = frozenset({"model"})  # the served model's id, learned by `prepare`
    fresh_keys = frozenset({"cache_salt"})  # a reference's salt, fresh on every request
    derived_keys = {"disable_radix_cache": "enable_prefix_caching"}

    def sent(self, body: dict[str, Any]) -> tuple[np.ndarray, int, bool]:
        return np.array(body["prompt"], np.int32), body["max_tokens"], "cache_salt" in body


def test_the_captured_extension_hit_the_prefix_cache_in_whole_blocks():
    answer = paths.DATA / "apis" / "vllm-tiny-llama__completion_cached_extend.json"
    c = VllmApi().parse(json.loads(answer.read_text()), "g0/b0/t1", max_new_tokens=6, top_k=3,
                        vocab_size=2048)
    assert c.cached_tokens == 384  # three blocks of 128 of the 400-token first turn
