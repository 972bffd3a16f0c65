"""A report as history rows: what is kept, how a golden is keyed, and every way a corrupt or
hostile report is refused (one line, nothing written: the store tests show the latter)."""

from __future__ import annotations

import copy

import pytest

from replay.history.ingest import INT64, NotAReport, golden_key, read_report, records
from tests.support.history_reports import run_report, sample


def refused(doc: object) -> str:
    with pytest.raises(NotAReport) as exc:
        records(doc)
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_a_run_is_keyed_by_golden_content_server_version_flags_and_time():
    [run] = records(run_report(version="0.5.24", hour=5, flags={"page_size": 64}))
    assert run.golden_key == "a" * 64
    assert run.server_version == "0.5.24"
    assert '"page_size":64' in run.flags and len(run.flags_sha256) == 64
    assert run.run_at is not None and run.run_at.isoformat() == "2026-09-01T05:00:00"


def test_a_llamacpp_server_is_versioned_by_its_build_info():
    doc = run_report()
    info = doc["server_meta"]["server_info"]
    del info["version"]
    info["build_info"] = "b7310-1f2e3d4c"
    assert records(doc)[0].server_version == "b7310-1f2e3d4c"


def test_a_server_without_a_version_is_unknown():
    doc = sample("passing")
    assert records(doc)[0].server_version == "unknown"


def test_without_a_content_digest_the_key_is_the_golden_metadata_less_its_shard():
    doc = sample("passing")
    shard = copy.deepcopy(doc)
    shard["golden_meta"]["shard"] = {"index": 1, "count": 4}
    assert golden_key(doc, doc["golden_meta"]).startswith("meta:")
    assert golden_key(doc, doc["golden_meta"]) == golden_key(shard, shard["golden_meta"])
    assert records(shard)[0].shard == "1/4"


def test_an_error_report_without_metadata_is_keyed_by_its_golden_name():
    doc = {"schema": "golden-replay/report/1", "verdict": "error", "error": "unreachable",
           "golden": "g.zarr", "server": "http://x:1", "policy": "exact", "summary": None,
           "requests": []}
    [run] = records(doc)
    assert run.golden_key.startswith("name:") and run.run_at is None and run.outcomes == ()


def test_non_finite_numbers_are_kept_as_nulls():
    doc = run_report(failing=("g0/b0/t1",))
    r = next(r for r in doc["requests"] if r["id"] == "g0/b0/t1")
    r.update(mean_kl="nan", max_ulp="inf")
    o = next(o for o in records(doc)[0].outcomes if o.request_id == "g0/b0/t1")
    assert o.mean_kl is None and o.max_ulp is None and o.divergence_position == 5


def test_the_same_document_however_written_has_one_digest():
    doc = run_report()
    assert records(doc)[0].report_sha256 == records(copy.deepcopy(doc))[0].report_sha256
    other = run_report(hour=1)
    assert records(doc)[0].report_sha256 != records(other)[0].report_sha256


def _with_request(**fields: object) -> dict:
    doc = run_report(failing=("g0/b0/t1",))
    doc["requests"][1].update(fields)
    return doc


@pytest.mark.parametrize("doc, why", [
    ([], "not an object"),
    ({"schema": "something/else", "verdict": "pass"}, "does not start with"),
    ({**sample("passing"), "verdict": "maybe"}, "verdict is 'maybe'"),
    ({**sample("passing"), "requests": {"a": 1}}, "requests is not a list"),
    ({**sample("passing"), "server_meta": "x"}, "server_meta is not an object"),
    ({**sample("matrix"), "matrix": {"reports": []}}, "reports is not an object"),
    (_with_request(id="g\x000"), "NUL"),
    (_with_request(id="\ud800"), "lone surrogate"),
    (_with_request(id="x" * 201), "201 characters"),
    (_with_request(id=7), "not text"),
    (_with_request(passed=1), "passed is 1"),
    (_with_request(repeat=True), "not a whole number"),
    (_with_request(cached_tokens=-3), "outside"),
    (_with_request(max_ulp=INT64 + 1), "outside"),
    (_with_request(mean_kl="lots"), "not a number"),
    (_with_request(cached_tokens_details={"device": "many"}), "not a whole number"),
    (_with_request(first_divergence=[1, 2]), "first_divergence is not an object"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_corrupt_or_hostile_report_is_refused_saying_why(doc, why):
    assert why in refused(doc)


def test_a_pass_with_a_failed_request_is_refused():
    doc = run_report(failing=("g0/b0/t1",))
    doc["verdict"] = "pass"
    assert "verdict is pass but request g0/b0/t1 did not pass" in refused(doc)


def test_a_bad_time_is_refused():
    doc = run_report()
    doc["server_meta"]["created"] = "yesterday"
    assert "not an ISO time" in refused(doc)


def test_a_hostile_matrix_profile_is_named_in_the_refusal():
    doc = sample("matrix")
    profile = next(iter(doc["matrix"]["reports"]))
    doc["matrix"]["reports"][profile]["verdict"] = 3
    assert f"profile {profile}" in refused(doc)


def test_long_error_text_is_cut_not_refused():
    doc = {"schema": "golden-replay/report/1", "verdict": "error", "error": "e" * 100_000,
           "golden": "g", "server": "s", "requests": []}
    assert len(records(doc)[0].error or "") == 4000


@pytest.mark.parametrize("content, why", [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
])
def test_a_file_that_is_not_json_is_refused(tmp_path, content, why):
    path = tmp_path / "r.json"
    path.write_bytes(content)
    with pytest.raises(NotAReport, match=why):
        read_report(path)


# --- who served a run, and which run it is ---------------------------------------------------

LAUNCH_A = {"host": "127.0.0.1", "port": 41873, "pid": 4242, "random_seed": 17,
            "launch_command": "python -m sglang.launch_server --port 41873 --log-dir /tmp/a1",
            "hicache_storage_dir": "/tmp/golden-scratch-a1", "log_dir": "/tmp/a1"}
LAUNCH_B = {"host": "10.0.0.7", "port": 52001, "pid": 5151, "random_seed": 99,
            "launch_command": "python -m sglang.launch_server --port 52001 --log-dir /tmp/b2",
            "hicache_storage_dir": "/tmp/golden-scratch-b2", "log_dir": "/tmp/b2"}


def test_the_flags_key_leaves_out_what_differs_between_two_launches():
    a, b = records(run_report(flags=LAUNCH_A))[0], records(run_report(flags=LAUNCH_B))[0]
    assert a.flags_sha256 == b.flags_sha256
    for word in ("41873", "4242", "launch_server", "scratch", "random_seed", "127.0.0.1"):
        assert word not in a.flags


@pytest.mark.parametrize("setting", [{"page_size": 64}, {"hicache_write_policy": "write_back"},
                                     {"attention_backend": "fa3"}, {"disable_radix_cache": True},
                                     {"fault": "host-bf16"}, {"mem_fraction_static": 0.5}])
def test_the_flags_key_changes_with_a_numerics_or_cache_setting(setting):
    base = records(run_report(flags=LAUNCH_A))[0]
    assert records(run_report(flags={**LAUNCH_A, **setting}))[0].flags_sha256 != base.flags_sha256


def test_the_launch_profile_is_recorded_beside_the_flags_key():
    doc = run_report()
    doc["server_target"] = "launch:sglang-hicache-seed fault=host-bf16"
    assert records(doc)[0].profile == "sglang-hicache-seed"
    doc["server_target"] = "http://h200:30000"
    assert records(doc)[0].profile is None
    matrix = sample("matrix")
    assert {r.profile for r in records(matrix)} == set(matrix["matrix"]["profiles"])


def test_a_run_is_its_run_id_and_an_old_report_its_digest():
    doc = run_report()
    doc["run_id"] = "4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
    assert records(doc)[0].run_id == "4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
    old = run_report()
    [run] = records(old)
    assert run.run_id == "report:" + run.report_sha256


@pytest.mark.parametrize("run_id", ["", "a b", "x" * 81, 7, "../etc"])
def test_a_run_id_that_is_not_one_is_refused(run_id):
    assert "run_id" in refused({**run_report(), "run_id": run_id})


def test_the_client_settings_are_kept():
    doc = {**run_report(), "client": {"concurrency": 16, "schedule": "lockstep"}}
    assert records(doc)[0].client == '{"concurrency":16,"schedule":"lockstep"}'


@pytest.mark.parametrize("created, why", [
    ("0001-01-01T00:00:00+00:00", "not a time a replay ran"),
    ("1999-12-31T23:59:59+00:00", "not a time a replay ran"),
    ("9999-12-31T00:00:00+00:00", "not a time a replay ran"),
    ("9999-12-31T23:59:59-05:00", "out of range"),
    ("0001-01-01T00:00:00+05:00", "out of range"),
])
def test_a_date_no_replay_ran_at_is_refused_at_add(created, why):
    doc = run_report()
    doc["server_meta"]["created"] = created
    assert why in refused(doc)


def test_a_date_a_day_ahead_is_refused_and_one_now_is_kept():
    from datetime import datetime, timedelta, timezone

    doc = run_report()
    now = datetime.now(timezone.utc)
    doc["server_meta"]["created"] = (now + timedelta(days=2)).isoformat()
    assert "not a time a replay ran" in refused(doc)
    doc["server_meta"]["created"] = now.isoformat()
    assert records(doc)[0].run_at is not None
