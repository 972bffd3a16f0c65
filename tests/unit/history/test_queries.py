"""What `golden history show` answers (on SQLite here, on PostgreSQL in
tests/integration/test_history_postgres.py): the timeline, the first
failing server version, flake rates per request and per version, the coverage of hit lengths
and tiers."""

from __future__ import annotations

import pytest

from replay.history.ingest import records
from replay.history.queries import golden_history, version_key
from replay.history.store import GoldenSelector, HistoryStore
from replay.utils.errors import UsageError
from tests.support.history_reports import run_report


def history(url: str, *docs: dict) -> dict:
    with HistoryStore.open(url) as store:
        store.add([r for d in docs for r in records(d)])
        return golden_history(store, GoldenSelector("a" * 12))


def test_versions_are_ordered_by_their_numbers():
    assert sorted(["0.5.23", "0.5.9", "0.5.10", "unknown", "0.4"], key=version_key) == [
        "0.4", "0.5.9", "0.5.10", "0.5.23", "unknown"]


def test_the_timeline_is_every_run_oldest_first(history_url):
    doc = history(history_url, run_report(hour=3, failing=("g0/b0/t1",)), run_report(hour=1))
    assert [(r["at"], r["verdict"]) for r in doc["timeline"]] == [
        ("2026-09-01T01:00:00Z", "pass"), ("2026-09-01T03:00:00Z", "fail")]
    assert doc["runs"] == 2 and doc["verdicts"] == {"pass": 1, "fail": 1}


def test_bisect_names_the_first_failing_version_and_the_last_passing_one(history_url):
    """Added out of order, and 0.5.10 after 0.5.9 although it sorts before it as text."""
    doc = history(history_url,
                  run_report(version="0.5.11", hour=4, failing=("g1/b0/t1",)),
                  run_report(version="0.5.9", hour=1),
                  run_report(version="0.5.10", hour=2, failing=("g1/b0/t1",)),
                  run_report(version="0.5.8", hour=0))
    assert doc["bisect"]["first_failing"] == "0.5.10"
    assert doc["bisect"]["last_passing"] == "0.5.9"
    assert doc["bisect"]["consistent"] is True
    assert [v["version"] for v in doc["versions"]] == ["0.5.8", "0.5.9", "0.5.10", "0.5.11"]


def test_bisect_says_when_a_later_version_passes_again(history_url):
    doc = history(history_url, run_report(version="1.0", hour=0, failing=("g0/b0/t1",)),
                  run_report(version="1.1", hour=1))
    assert doc["bisect"]["first_failing"] == "1.0" and doc["bisect"]["last_passing"] is None
    assert doc["bisect"]["consistent"] is False and "passes again" in doc["bisect"]["note"]


def test_no_failing_run_means_no_first_failing_version(history_url):
    doc = history(history_url, run_report(version="1.0"), run_report(version="1.1", hour=1))
    assert doc["bisect"]["first_failing"] is None and doc["bisect"]["last_passing"] == "1.1"


def test_a_request_that_passes_and_fails_on_one_setup_is_flaky(history_url):
    doc = history(history_url,
                  run_report(hour=0), run_report(hour=1, failing=("g2/b1/t1",)),
                  run_report(hour=2), run_report(hour=3, failing=("g2/b1/t1",)))
    top = doc["requests"][0]
    assert (top["id"], top["observed"], top["failed"], top["fail_rate"], top["flips"],
            top["flaky"]) == ("g2/b1/t1", 4, 2, 0.5, 3, True)
    assert top["first_divergence_positions"] == {"5": 2}
    steady = next(r for r in doc["requests"] if r["id"] == "g0/b0/t0")
    assert steady["failed"] == 0 and steady["flips"] == 0 and not steady["flaky"]
    [version] = doc["versions"]
    assert version["fail_rate"] == 0.5 and version["flaky_requests"] == 1
    assert version["flake_rate"] == round(1 / 27, 4)


def test_failing_only_under_other_flags_is_not_flaky(history_url):
    doc = history(history_url, run_report(hour=0),
                  run_report(hour=1, failing=("g2/b1/t1",), flags={"page_size": 64}))
    top = doc["requests"][0]
    assert top["id"] == "g2/b1/t1" and top["flips"] == 1 and top["flaky"] is False


def test_coverage_counts_hit_lengths_and_tier_tokens_per_version(history_url):
    """Version 1.1 hits 64 tokens more than 1.0 everywhere, all of them on the device."""
    old = run_report(version="1.0", hour=0)
    new = run_report(version="1.1", hour=1)
    for r in new["requests"]:
        if r["cached_tokens"]:
            r["cached_tokens"] += 64
            r["cached_tokens_details"] = {"device": r["cached_tokens"]}
    doc = history(history_url, old, new)
    cov = doc["coverage"]
    assert cov["by_version"]["1.0"]["tiers"] == {"device": 2640, "host": 1008, "storage": 96}
    assert cov["by_version"]["1.1"]["tiers"] == {"device": 2640 + 1008 + 96 + 64 * sum(
        1 for r in new["requests"] if r["cached_tokens"])}
    lengths_old = {int(k) for k in cov["by_version"]["1.0"]["hit_lengths"]}
    lengths_new = {int(k) for k in cov["by_version"]["1.1"]["hit_lengths"]}
    assert lengths_new == {0} | {n + 64 for n in lengths_old if n}
    [change] = cov["changes"]
    assert (change["from"], change["to"], change["tiers_lost"], change["tiers_gained"]) == (
        "1.0", "1.1", ["host", "storage"], [])
    assert sum(cov["hit_lengths"].values()) == 54


def test_error_runs_are_in_the_timeline_but_judge_no_request(history_url):
    error = {"schema": "golden-replay/report/1", "verdict": "error", "error": "unreachable",
             "golden": "goldens/branching.zarr", "server": "http://x:1", "requests": [],
             "golden_sha256": "a" * 64}
    doc = history(history_url, run_report(hour=0), error)
    assert doc["verdicts"] == {"pass": 1, "error": 1}
    assert all(r["observed"] == 1 for r in doc["requests"])


def test_a_golden_is_found_by_digest_prefix_or_name(history_url):
    with HistoryStore.open(history_url) as store:
        store.add(records(run_report()))
        by_name = golden_history(store, GoldenSelector("branching.zarr"))
        by_path = golden_history(store, GoldenSelector("goldens/branching.zarr/"))
        with pytest.raises(UsageError, match="no run of 'other.zarr'"):
            golden_history(store, GoldenSelector("other.zarr"))
    assert by_name["runs"] == by_path["runs"] == 1


def test_two_launches_of_one_profile_are_one_setup_so_a_flip_is_flaky(history_url):
    """Another port, pid, launch command and scratch directory each launch: one flags key."""
    launch = lambda port: {"port": port, "pid": port + 1, "launch_command": f"serve --port {port}",  # noqa: E731
                           "hicache_storage_dir": f"/tmp/scratch-{port}"}
    doc = history(history_url, run_report(hour=0, flags=launch(41001)),
                  run_report(hour=1, flags=launch(41002), failing=("g2/b1/t1",)))
    top = doc["requests"][0]
    assert (top["id"], top["flaky"]) == ("g2/b1/t1", True)


def test_the_version_line_counts_exactly_the_flaky_requests(history_url):
    """A request that failed only under other flags is flaky neither per request nor in its
    version's count (the two once disagreed: 'flaky requests 1' with no request flaky)."""
    doc = history(history_url, run_report(hour=0),
                  run_report(hour=1, failing=("g2/b1/t1",), flags={"page_size": 64}))
    [version] = doc["versions"]
    assert version["flaky_requests"] == sum(r["flaky"] for r in doc["requests"]) == 0


def _named(doc: dict, name: str, digest: str) -> dict:
    return {**doc, "golden": name, "golden_sha256": digest}


def test_a_golden_s_digest_selects_its_own_runs_only(history_url):
    """a/t.zarr and b/t.zarr share a file name, not their content: neither counts the other."""
    with HistoryStore.open(history_url) as store:
        store.add([r for d in (_named(run_report(hour=0), "a/t.zarr", "a" * 64),
                               _named(run_report(hour=1, failing=("g0/b0/t1",)), "b/t.zarr", "b" * 64))
                   for r in records(d)])
        mine = golden_history(store, GoldenSelector("a/t.zarr", digest="a" * 64))
        by_prefix = golden_history(store, GoldenSelector("bbbbbbbb"))
        by_path = golden_history(store, GoldenSelector("b/t.zarr"))
    assert (mine["runs"], mine["verdicts"]) == (1, {"pass": 1})
    assert by_prefix["golden_keys"] == by_path["golden_keys"] == ["b" * 64]


def test_a_name_several_goldens_had_is_refused_naming_each(history_url):
    from replay.history.queries import AmbiguousGolden

    with HistoryStore.open(history_url) as store:
        store.add([r for d in (_named(run_report(hour=0), "a/t.zarr", "a" * 64),
                               _named(run_report(hour=1), "b/t.zarr", "b" * 64))
                   for r in records(d)])
        with pytest.raises(AmbiguousGolden) as exc:
            golden_history(store, GoldenSelector("t.zarr"))
    message = str(exc.value)
    assert "'t.zarr' matches 2 goldens" in message and "\n" not in message
    assert "aaaaaaaaaaaa (a/t.zarr)" in message and "bbbbbbbbbbbb (b/t.zarr)" in message


def test_a_golden_directory_with_no_run_of_its_content_is_not_found_by_its_name(history_url):
    with HistoryStore.open(history_url) as store:
        store.add(records(_named(run_report(), "a/t.zarr", "a" * 64)))
        with pytest.raises(UsageError, match="no run of golden a/t.zarr"):
            golden_history(store, GoldenSelector("a/t.zarr", digest="c" * 64))
