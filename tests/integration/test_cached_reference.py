"""`golden record --reference cached`: a reference recorded with the cache on and nothing evicted,
so follow-up turns reuse KV their parent's decode wrote, as a cached replay does; the golden says
so, and a replay must reuse exactly what the reference reused (docs/control.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.golden.store import read_golden
from tests.support.goldens import SMALL_TREE
from tests.support.stub_server import StubConfig, StubServer

runner = CliRunner()


def record(tmp_path: Path, config: StubConfig, *extra: str) -> tuple[int, str, Path]:
    (tmp_path / "s.toml").write_text(SMALL_TREE)
    out = tmp_path / "g.zarr"
    with StubServer(config) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario",
                                  str(tmp_path / "s.toml"), "--out", str(out), "--quiet", *extra])
    return res.exit_code, res.output, out


@pytest.fixture(scope="module")
def cached_golden(tmp_path_factory) -> Path:
    code, output, out = record(tmp_path_factory.mktemp("cached"), StubConfig(radix=True),
                               "--reference", "cached")
    assert code == 0, output
    return out


def test_a_cached_reference_says_so_in_the_golden_and_keeps_its_hits(cached_golden):
    golden = read_golden(cached_golden)
    assert golden.meta["reference"] == "cached"
    assert all(r.cached_tokens > 0 for r in golden.requests if r.turn > 0)


def test_a_cache_off_reference_writes_no_reference_kind(tmp_path):
    code, output, out = record(tmp_path, StubConfig(radix=False))
    assert code == 0, output
    assert "reference" not in read_golden(out).meta


def test_a_cached_reference_from_a_server_with_its_cache_off_is_refused(tmp_path):
    code, output, out = record(tmp_path, StubConfig(radix=False), "--reference", "cached")
    assert code == 2 and "needs a server with its prefix cache on" in output
    assert not out.exists()


def test_a_cached_reference_from_a_pool_that_must_evict_is_refused(tmp_path):
    config = StubConfig(radix=True, extra_server_info={"max_total_num_tokens": 64})
    code, output, _ = record(tmp_path, config, "--reference", "cached")
    assert code == 2 and "needs a pool nothing is evicted from" in output


def test_an_unknown_reference_kind_is_a_usage_error(tmp_path):
    code, output, _ = record(tmp_path, StubConfig(radix=True), "--reference", "warm")
    assert code == 2 and "invalid --reference 'warm'" in output


def replay(golden: Path, tmp_path: Path, config: StubConfig) -> tuple[int, dict]:
    report = tmp_path / "r.json"
    with StubServer(config) as stub:
        res = runner.invoke(app, ["replay", str(golden), "--server", stub.url, "--report",
                                  str(report), "--quiet"])
    return res.exit_code, json.loads(report.read_text())


def test_a_replay_that_reuses_what_the_reference_reused_passes(cached_golden, tmp_path):
    code, doc = replay(cached_golden, tmp_path, StubConfig(radix=True))
    assert code == 0, doc["verdict"]
    turn1 = [r for r in doc["requests"] if r["id"].endswith("/t1")]
    assert all(r["expected_min_cached"] == r["cached_tokens"] > 0 for r in turn1)


def test_a_replay_that_reuses_less_than_the_reference_is_a_cache_miss(cached_golden, tmp_path):
    """The same answers, but nothing reused: on a server whose decode and prefill differ, those
    positions would have been prefilled, so the replay is not the reference's computation."""
    code, doc = replay(cached_golden, tmp_path, StubConfig(radix=False))
    followups = [r for r in doc["requests"] if not r["id"].endswith("/t0")]
    assert code == 1
    assert all(r["status"] == "cache_miss" for r in followups)
    assert "what the cached reference reused" in followups[0]["cache_problem"]


def test_golden_update_keeps_a_cached_reference_cached(cached_golden, tmp_path):
    copy = tmp_path / "goldens" / "g.zarr"
    copy.parent.mkdir()
    import shutil
    shutil.copytree(cached_golden, copy)
    with StubServer(StubConfig(radix=True)) as stub:
        res = runner.invoke(app, ["update", str(copy.parent), "--server", stub.url, "--quiet"])
    assert res.exit_code == 0, res.output
    assert read_golden(copy).meta["reference"] == "cached"


def test_golden_show_says_which_reference_a_golden_holds(cached_golden):
    res = runner.invoke(app, ["show", str(cached_golden)], terminal_width=300)
    assert res.exit_code == 0
    assert "cached reference from" in res.output.splitlines()[0]
