"""The session layer: one call from a server target to a golden or a report."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.jobs import session
from replay.server.transport import ClientOptions
from replay.utils.errors import UsageError
from replay.golden.store import read_golden
from replay.run.journal import journal_path
from replay.run.replayer import ReplayOptions
from replay.golden.scenario import ScenarioSpec, build_plan
from tests.support.goldens import record_spec
from tests.support.stub_server import StubConfig, StubServer

SPEC = ScenarioSpec(name="tiny", groups=2, branches=2, prefix_len=24, suffix_len=4, turns=1,
                    turn_suffix_len=4, max_new_tokens=6, top_k=3, seed=1)


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    return record_spec(tmp_path_factory.mktemp("session"), SPEC)


def test_record_golden_writes_the_golden_and_removes_its_journal(golden):
    assert len(read_golden(golden).requests) == SPEC.requests
    assert not journal_path(golden).exists()


def test_record_golden_refuses_to_overwrite_without_force(golden):
    with pytest.raises(UsageError, match="--force"):
        session.record_golden(build_plan(SPEC), golden, session.ServerTarget(url="http://127.0.0.1:9"))


def test_replay_golden_returns_the_report_document(golden):
    with StubServer(StubConfig()) as stub:
        doc = session.replay_golden(golden, session.ServerTarget(url=stub.url))
    assert doc["verdict"] == "pass" and doc["summary"]["requests"] == SPEC.requests
    assert doc["server_meta"]["api"] == "sglang" and "flush_cache" in doc["server_meta"]["flush"]


def test_replay_golden_takes_a_golden_in_memory(golden):
    with StubServer(StubConfig()) as stub:
        doc = session.replay_golden(read_golden(golden), session.ServerTarget(url=stub.url),
                                    name="mine")
    assert doc["verdict"] == "pass" and doc["golden"] == "mine"


def test_an_unreachable_server_is_an_error_report_not_an_exception(golden):
    doc = session.replay_golden(golden, session.ServerTarget(url="http://127.0.0.1:9"),
                                client=ClientOptions(retries=0, backoff=0.0))
    assert doc["verdict"] == "error" and "cannot connect" in doc["error"]


def test_an_unreadable_golden_is_an_error_report(tmp_path):
    doc = session.replay_golden(tmp_path / "missing.zarr", session.ServerTarget(url="http://127.0.0.1:9"))
    assert doc["verdict"] == "error" and doc["requests"] == []


def test_the_api_is_chosen_by_name_as_well_as_detected(golden):
    with StubServer(StubConfig()) as stub:
        doc = session.replay_golden(golden, session.ServerTarget(url=stub.url), api="sglang")
    assert doc["verdict"] == "pass"


def test_an_unknown_api_is_a_usage_error_report(golden):
    doc = session.replay_golden(golden, session.ServerTarget(url="http://127.0.0.1:9"), api="grpc")
    assert doc["verdict"] == "error" and "unknown --api 'grpc'" in doc["error"]


def test_a_shard_replays_only_its_part(golden):
    with StubServer(StubConfig()) as stub:
        doc = session.replay_golden(golden, session.ServerTarget(url=stub.url), shard="1/2")
    assert {r["id"].split("/")[0] for r in doc["requests"]} == {"g0"}


def test_progress_is_reported_through_the_callback(golden):
    ticks: list[str] = []
    seen: list[tuple[str, int]] = []

    def bar(label: str, total: int):
        import contextlib

        seen.append((label, total))
        return contextlib.nullcontext(lambda request, failed: ticks.append(request))

    with StubServer(StubConfig()) as stub:
        session.replay_golden(golden, session.ServerTarget(url=stub.url),
                              ReplayOptions(repeat=2), progress=bar)
    assert seen == [("replay tiny.zarr", 2 * SPEC.requests)] and len(ticks) == 2 * SPEC.requests


@pytest.mark.parametrize("kwargs, message", [
    ({"repeat": 0}, "--repeat"),
    ({"schedule": "random"}, "unknown schedule"),
    ({"require_tier": "disk"}, "--require-tier"),
    ({"policy": "kl:x"}, "policy"),
])
def test_replay_options_validate_themselves(kwargs, message):
    with pytest.raises(UsageError, match=message):
        ReplayOptions(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"concurrency": 0}, "--concurrency"),
    ({"request_timeout": float("inf")}, "--timeout"),
    ({"request_timeout": float("nan")}, "--timeout"),
    ({"request_timeout": 0}, "--timeout"),
])
def test_client_options_validate_themselves(kwargs, message):
    with pytest.raises(UsageError, match=message):
        ClientOptions(**kwargs)


def test_a_reference_through_an_adapter_that_bypasses_the_cache_gets_no_radix_warning():
    from replay.server.apis import get_api

    assert session.reference_warnings({}, get_api("llamacpp", reference=True)) == []
    assert session.reference_warnings({"disable_radix_cache": False},
                                      get_api("vllm", reference=True)) == []  # salted requests
    assert session.reference_warnings({"disable_radix_cache": True}, get_api("sglang")) == []


def test_the_radix_cache_warning_comes_from_a_server_reporting_its_cache_on():
    from replay.server.apis import get_api

    assert "radix cache on" in session.reference_warnings({"disable_radix_cache": False},
                                                          get_api("sglang"))[0]


def test_no_radix_cache_warning_from_a_server_that_does_not_say():
    """An OpenAI-compatible server reports nothing about its cache: the tool cannot know."""
    from replay.server.apis import get_api

    assert session.reference_warnings({"served_models": ["m"]}, get_api("openai", reference=True)) == []
    assert session.reference_warnings({}, get_api("sglang")) == []


