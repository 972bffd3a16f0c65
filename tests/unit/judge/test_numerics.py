"""Numerics parity: the replay server must run the reference's arithmetic (replay/judge/numerics.py),
else the replay is refused (exit 2) unless --allow-numerics-mismatch; the report shows the fields."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.judge.numerics import compare_numerics
from tests.support.goldens import replay_on_stub
from tests.support.stub_server import StubConfig, StubServer

SCENARIO = """groups = 1
branches = 2
prefix_len = 40
suffix_len = 8
turns = 2
turn_suffix_len = 4
max_new_tokens = 6
top_k = 2
"""
REFERENCE = {"attention_backend": "fa4", "page_size": 16, "chunked_prefill_size": 2048,
             "dtype": "bfloat16", "disable_radix_cache": True, "max_total_tokens": 500000}
runner = CliRunner()


def test_identical_numerics_fields_do_not_differ():
    replay = dict(REFERENCE, disable_radix_cache=False, max_total_tokens=4096)
    assert compare_numerics(REFERENCE, replay).differing == ()


def test_each_differing_field_is_named_with_both_values():
    replay = dict(REFERENCE, attention_backend="flashinfer", page_size=1)
    result = compare_numerics(REFERENCE, replay)
    assert result.differing == ("attention_backend", "page_size")
    assert "attention_backend flashinfer (golden: fa4), page_size 1 (golden: 16)" \
        in result.mismatch_line()


def test_cache_settings_are_not_numerics():
    replay = dict(REFERENCE, disable_radix_cache=False, hicache_io_backend="direct",
                  max_total_tokens=4096, disable_overlap_schedule=False)
    assert compare_numerics(REFERENCE, replay).differing == ()


@pytest.mark.parametrize("golden_info, replay_info", [
    ({}, REFERENCE),                       # an old golden, or one from llama.cpp
    (REFERENCE, {"page_size": 16}),        # a server that reports only some fields
])
def test_a_field_absent_on_either_side_is_not_a_mismatch(golden_info, replay_info):
    result = compare_numerics(golden_info, replay_info)
    assert result.differing == ()
    assert "attention_backend" in result.fields


def test_a_layout_field_both_servers_declare_independent_is_shown_not_enforced():
    reference = dict(REFERENCE, numerics_independent_of=["page_size"])
    replay = dict(REFERENCE, page_size=64, numerics_independent_of=["page_size"])
    result = compare_numerics(reference, replay)
    assert result.differing == ()
    assert result.fields["page_size"] == {"golden": 16, "replay": 64}
    assert result.independent == ("page_size",)


def test_the_replay_server_alone_cannot_declare_a_field_independent():
    replay = dict(REFERENCE, page_size=64, numerics_independent_of=["page_size"])
    assert compare_numerics(REFERENCE, replay).differing == ("page_size",)


def test_no_server_can_declare_itself_independent_of_deterministic_inference():
    declared = {"numerics_independent_of": ["enable_deterministic_inference", "attention_backend"]}
    reference = dict(REFERENCE, enable_deterministic_inference=True, **declared)
    replay = dict(REFERENCE, enable_deterministic_inference=False, attention_backend="triton",
                  **declared)
    result = compare_numerics(reference, replay)
    assert result.differing == ("attention_backend", "enable_deterministic_inference")
    assert result.independent == ()


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("golden")
    (d / "s.toml").write_text(SCENARIO)
    out = d / "s.zarr"
    with StubServer(StubConfig(radix=False, extra_server_info=REFERENCE)) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", str(d / "s.toml"),
                                  "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    return out


def replay(golden: Path, tmp_path: Path, server_info: dict, *extra: str):
    info = dict(server_info, disable_radix_cache=False)
    return replay_on_stub(golden, tmp_path, StubConfig(extra_server_info=info), *extra)


def test_a_replay_server_with_other_numerics_is_refused_naming_the_fields(golden, tmp_path):
    res, doc = replay(golden, tmp_path, dict(REFERENCE, attention_backend="flashinfer"))
    assert res.exit_code == 2 and doc["verdict"] == "error"
    assert "attention_backend flashinfer (golden: fa4)" in doc["error"]
    assert "--allow-numerics-mismatch" in doc["error"]


def test_a_numerics_mismatch_error_report_carries_the_numerics_object(golden, tmp_path):
    res, doc = replay(golden, tmp_path, dict(REFERENCE, attention_backend="flashinfer"))
    assert res.exit_code == 2
    assert doc["numerics"]["differing"] == ["attention_backend"]
    assert doc["numerics"]["fields"]["attention_backend"] == {"golden": "fa4",
                                                              "replay": "flashinfer"}
    assert doc["numerics"]["mismatch_allowed"] is False


def test_allowing_the_mismatch_replays_and_the_report_shows_it(golden, tmp_path):
    res, doc = replay(golden, tmp_path, dict(REFERENCE, chunked_prefill_size=8192),
                      "--allow-numerics-mismatch")
    assert res.exit_code == 0, res.output
    assert doc["numerics"]["differing"] == ["chunked_prefill_size"]
    assert doc["numerics"]["mismatch_allowed"] is True


def test_a_matching_replay_reports_the_compared_fields(golden, tmp_path):
    res, doc = replay(golden, tmp_path, REFERENCE)
    assert res.exit_code == 0, res.output
    assert doc["numerics"]["differing"] == []
    assert doc["numerics"]["fields"]["attention_backend"] == {"golden": "fa4", "replay": "fa4"}
