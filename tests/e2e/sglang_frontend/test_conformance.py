"""Conformance against SGLang 0.5.23's own HTTP front end (its HTTP server, TokenizerManager and
DetokenizerManager) with the embedded engine as its scheduler process: every byte the client parses
here was produced by SGLang's code. One reference server (with `--api-key`) and one HiCache server
serve the whole module; each costs 25-90 s to start on 2 cores.

Needs SGLang: `bash scripts/install_sglang.sh` (scripts/test.sh runs it).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.utils import aio
from replay.server.transport import ClientOptions
from replay.server.connection import Connection, connect
from replay.utils.errors import MalformedResponse, ServerError
from replay.golden.store import read_golden
from replay.server.launch import launched
from replay.server.profile import LaunchProfile, load_profile
from replay.server.apis.sglang import generate_body, parse_completion
from replay.sglang_frontend.locate import install_hint, sglang_python
from tests.support import paths

pytestmark = pytest.mark.skipif(sglang_python() is None, reason=install_hint())

COMMITTED = paths.REPO / "goldens" / "hicache-branching.zarr"
KEY = "conformance-secret-key"
LONG = 1500  # output tokens of a request that keeps the server busy for seconds even on a quiet machine
runner = CliRunner()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> str:
    logs = tmp_path_factory.mktemp("sglang-reference")
    # the launcher's warm-up /generate carries no key (docs/findings.md); /health needs none
    profile = replace(load_profile("embedded-sglang-reference"), warmup=False)
    with launched(profile, model=None,
                  log_path=logs / "server.log", extra_args=["--api-key", KEY]) as url:
        yield url


@pytest.fixture(scope="module")
def hicache(tmp_path_factory) -> str:
    """Started as a user would: `golden serve --frontend sglang --profile hicache`."""
    logs = tmp_path_factory.mktemp("sglang-hicache")
    serve = LaunchProfile(
        name="golden-serve-frontend-sglang", description="golden serve --frontend sglang",
        command=("{python}", "-m", "cli", "serve", "--frontend", "sglang", "--profile", "hicache",
                 "--host", "{host}", "--port", "{port}"),
        cwd="{replay_root}", startup_timeout=300, stop_timeout=20)
    with launched(serve, model=None, log_path=logs / "server.log") as url:
        yield url


@pytest.fixture(scope="module")
def recorded(reference, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("recorded") / "hicache-branching.zarr"
    result = runner.invoke(app, ["record", "--server", reference, "--scenario", "hicache-branching",
                                 "--out", str(out), "--api-key", KEY, "-q"])
    assert result.exit_code == 0, result.output
    return out


def http(url: str, path: str, body: dict | None = None, key: str | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data, headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def client_run(url: str, work, key: str | None = KEY):
    """`work(connection)` on the client's own SGLang connection."""
    async def go():
        options = ClientOptions(api_key=key, retries=0, flush_wait=60)
        async with connect(url, options, "sglang") as conn:
            return await work(conn)
    return aio.run(go())


# --- record and replay ------------------------------------------------------------------------


def test_recording_through_sglang_is_bit_identical_to_the_native_golden(recorded):
    result = runner.invoke(app, ["diff", str(COMMITTED), str(recorded)])
    assert result.exit_code == 0, result.output
    ours, native = read_golden(recorded), read_golden(COMMITTED)
    assert [r.id for r in ours.requests] == [r.id for r in native.requests]
    for mine, theirs in zip(ours.requests, native.requests):
        assert mine.output_ids.tobytes() == theirs.output_ids.tobytes()
        assert mine.logprobs.tobytes() == theirs.logprobs.tobytes()
        assert mine.top_ids.tobytes() == theirs.top_ids.tobytes()
        assert mine.top_logprobs.tobytes() == theirs.top_logprobs.tobytes()


def test_the_recorded_golden_never_holds_the_api_key(recorded):
    meta = json.dumps(read_golden(recorded).meta)
    assert "api_key" in meta  # SGLang reports it (in clear) ...
    assert KEY not in meta  # ... and the client redacts it


def test_hicache_replay_passes_with_host_tier_hits(hicache, tmp_path):
    report = tmp_path / "r.json"
    result = runner.invoke(app, ["replay", str(COMMITTED), "--server", hicache, "--require-tier",
                                 "host", "--report", str(report), "-q"])
    assert result.exit_code == 0, result.output
    doc = json.loads(report.read_text())
    assert doc["verdict"] == "pass"
    assert doc["summary"]["cached_tokens_by_tier"]["host"] > 0
    assert doc["expect_cache"] == "mamba:128"  # `auto` from SGLang's /server_info and /model_info


def test_server_info_is_sglangs_resolution_of_the_engine_settings(hicache):
    status, text = http(hicache, "/server_info")
    info = json.loads(text)
    assert status == 200 and info["version"] == "0.5.23"
    assert info["uses_mamba_radix_cache"] is True  # decided by SGLang from the architecture
    assert info["enable_hierarchical_cache"] is True and info["page_size"] == 64
    assert info["mamba_track_interval"] == 128 and info["disable_overlap_schedule"] is False
    assert info["hicache_mem_layout"] == "page_first_direct"  # SGLang's rewrite of page_first
    assert info["max_total_num_tokens"] == 3072  # the scheduler's handshake


def test_the_openai_route_is_refused_because_sglang_answers_token_text(hicache, tmp_path):
    result = runner.invoke(app, ["replay", str(COMMITTED), "--server", hicache, "--api", "openai",
                                 "--report", str(tmp_path / "r.json"), "-q"])
    assert result.exit_code == 2, result.output
    assert "returns token text, not ids" in json.loads((tmp_path / "r.json").read_text())["error"]


# --- SGLang's own error paths -----------------------------------------------------------------


def test_golden_serve_refuses_an_api_key_without_the_sglang_front_end():
    result = runner.invoke(app, ["serve", "--api-key", "k"])
    assert result.exit_code == 2
    assert "--api-key needs --frontend sglang" in result.output


def test_an_unknown_sampling_key_is_a_400_from_sglangs_contract_gate(reference):
    body = generate_body([5, 6, 7], 4, 0)
    body["sampling_params"]["not_a_sampling_key"] = 1

    with pytest.raises(ServerError, match="HTTP 400: .*unknown field `not_a_sampling_key`"):
        client_run(reference, lambda c: c.client.post("/generate", body, "g0/b0/t0"))


def test_a_request_without_the_api_key_is_refused(reference):
    status, text = http(reference, "/generate", generate_body([5, 6, 7], 4, 0))
    assert status == 401, text
    with pytest.raises(ServerError, match="HTTP 401"):
        client_run(reference, lambda c: c.client.post("/generate", generate_body([5, 6, 7], 4, 0),
                                                      "r"), key="wrong")


def test_a_flush_while_busy_is_refused_and_the_client_waits_it_out(reference):
    """The flush returns once the scheduler is idle; the long answer still travels through SGLang's
    detokenizer and HTTP server after that, so it may reach the client a moment after the flush's
    200 (CI saw it). What the flush must not do is return while the request still generates."""
    async def work(conn: Connection):
        loop = asyncio.get_running_loop()
        body = generate_body([5, 6, 7], LONG, 0)
        long = asyncio.create_task(conn.client.post("/generate", body, "long"))
        await asyncio.sleep(0.5)
        status, text = await conn.client.raw("POST", "/flush_cache", "flush")
        await conn.flush_cache()  # SGLang waits until idle (?timeout=), or the client retries
        flushed_at = loop.time()
        answer = await long
        return status, text, loop.time() - flushed_at, answer

    status, text, answer_lag, answer = client_run(reference, work)
    assert (status, text) == (400, "Flush cache failed.\n")
    assert answer_lag < 1.0, f"the flush returned {answer_lag:.2f} s before the answer came"
    assert len(answer["output_ids"]) == LONG


def test_a_deferred_flush_times_out_while_busy(reference):
    async def work(conn: Connection):
        body = generate_body([5, 6, 7], LONG, 0)
        long = asyncio.create_task(conn.client.post("/generate", body, "long"))
        await asyncio.sleep(0.5)
        result = await conn.client.raw("POST", "/flush_cache?timeout=0.2", "flush")
        await long
        return result

    assert client_run(reference, work) == (400, "Timed out waiting for idle state.")


def test_an_aborted_request_is_an_error_naming_the_abort(reference):
    async def work(conn: Connection):
        body = generate_body([5, 6, 7], LONG, 0)
        long = asyncio.create_task(conn.client.post("/generate", body, "long"))
        await asyncio.sleep(1.0)
        aborted = await conn.client.raw("POST", "/abort_request", "abort", {"abort_all": True})
        assert aborted[0] == 200
        return await long

    answer = client_run(reference, work)
    assert answer["meta_info"]["finish_reason"]["type"] == "abort"  # SGLang: 200, partial output
    with pytest.raises(MalformedResponse, match="long: the server aborted the request: Aborted"):
        parse_completion(answer, "long", max_new_tokens=LONG, top_k=0)
    flushed = client_run(reference, lambda c: c.client.raw("POST", "/flush_cache?timeout=60", "f"))
    assert flushed[0] == 200
