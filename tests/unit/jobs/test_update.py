"""Re-recording goldens on purpose: unchanged ones untouched, changed ones shown then replaced."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from cli.main import exits_cleanly
from cli.update_cmd import update
from replay.golden.store import read_golden
from replay.jobs.update import CHANGED, ERROR, UNCHANGED, UpdateOptions, find_goldens, update_goldens
from tests.data.fake_servers.helpers import SMALL, record_golden
from tests.support.stub_server import StubConfig, StubServer

runner = CliRunner()


def update_app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command("update")(exits_cleanly(update))
    app.command("unused")(lambda: None)
    return app


@pytest.fixture
def goldens(tmp_path):
    """Two goldens of different seeds, one of them in a subdirectory."""
    d = tmp_path / "goldens"
    a = record_golden(d / "a.zarr")
    b = record_golden(d / "nested" / "b.zarr", spec=replace(SMALL, seed=4))
    return d, a, b


def drift_on(golden_path):
    """A stub tamper moving position 1 by one ULP, only for conversations of this golden."""
    prefix = read_golden(golden_path).prefixes[0].tolist()

    def tamper(n, ids, resp):
        if ids[:len(prefix)] == prefix:
            e = resp["meta_info"]["output_token_logprobs"][1]
            e[0] = float(np.nextafter(np.float32(e[0]), np.float32(0)))
        return resp
    return tamper


def snapshot(path):
    return sorted((p.relative_to(path), p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file())


def test_find_goldens_is_recursive_and_sorted(goldens):
    d, a, b = goldens
    assert find_goldens(d) == [a, b]


def test_unchanged_goldens_are_left_untouched(goldens):
    d, a, b = goldens
    before = snapshot(d)
    with StubServer(StubConfig(radix=False)) as stub:
        results = update_goldens(d, stub.url)
    assert [(r.path, r.status, r.written) for r in results] == [(a, UNCHANGED, False), (b, UNCHANGED, False)]
    assert results[0].warnings == []
    assert snapshot(d) == before


def test_changed_golden_is_reported_then_replaced(goldens):
    d, a, b = goldens
    old_b = snapshot(b)
    seen = []
    with StubServer(StubConfig(radix=False, tamper=drift_on(a))) as stub:
        results = update_goldens(d, stub.url, notify=lambda r: seen.append((r.path, r.status, r.written)))
    assert seen == [(a, CHANGED, False), (b, UNCHANGED, False)]  # notified before the write
    changed = results[0]
    assert changed.status == CHANGED and changed.written
    assert changed.report["verdict"] == "fail"
    assert changed.report["summary"]["requests_failed"] == 4  # group 0: two branches, two turns
    assert {r["first_divergence"]["position"] for r in changed.report["requests"] if not r["passed"]} == {1}
    assert snapshot(b) == old_b
    with StubServer(StubConfig(radix=False, tamper=drift_on(a))) as stub:
        again = update_goldens(d, stub.url)
    assert [r.status for r in again] == [UNCHANGED, UNCHANGED]  # the new recording was written


def test_dry_run_writes_nothing(goldens):
    d, a, _ = goldens
    before = snapshot(d)
    with StubServer(StubConfig(radix=False, tamper=drift_on(a))) as stub:
        results = update_goldens(d, stub.url, options=UpdateOptions(dry_run=True))
    assert [(r.status, r.written) for r in results] == [(CHANGED, False), (UNCHANGED, False)]
    assert snapshot(d) == before


def test_unreadable_golden_is_an_error_and_the_others_still_run(goldens):
    d, a, b = goldens
    (d / "broken.zarr").mkdir()
    with StubServer(StubConfig(radix=False)) as stub:
        results = update_goldens(d, stub.url)
    assert [r.status for r in results] == [UNCHANGED, ERROR, UNCHANGED]
    assert "broken.zarr" in results[1].error


def test_a_server_with_its_cache_on_draws_a_warning(goldens):
    d, _, _ = goldens
    with StubServer(StubConfig(radix=True)) as stub:
        results = update_goldens(d, stub.url)
    assert "radix cache on" in results[0].warnings[0]


def test_cli_shows_the_diff_and_exit_codes(goldens, tmp_path):
    d, a, _ = goldens
    with StubServer(StubConfig(radix=False, tamper=drift_on(a))) as stub:
        dry = runner.invoke(update_app(), ["update", str(d), "--server", stub.url, "--dry-run",
                                           "--report-dir", str(tmp_path / "r")])
        real = runner.invoke(update_app(), ["update", str(d), "--server", stub.url])
    assert dry.exit_code == 1, dry.output
    assert f"would change (not written, --dry-run): {a}: 4 of 8 request(s) differ, max ulp 1" in dry.output
    assert "g0/b0/t0#0 logprob_drift" in dry.output
    assert "unchanged: " in dry.output
    assert "2 golden(s): 1 would change, 1 unchanged, 0 error(s)" in dry.output
    reports = sorted(str(p.relative_to(tmp_path / "r")) for p in (tmp_path / "r").rglob("*.json"))
    assert reports == ["a.zarr.json", "nested/b.zarr.json"]
    assert real.exit_code == 0, real.output
    assert f"changed (replacing it): {a}" in real.output
    assert "2 golden(s): 1 changed and replaced, 1 unchanged, 0 error(s)" in real.output


@pytest.mark.parametrize("args, message", [
    ([], "exactly one of --server URL or --launch PROFILE"),
    (["--server", "http://127.0.0.1:9", "--launch", "embedded-reference"], "exactly one"),
    (["--launch", "sglang-reference"], "needs a model"),
])
def test_cli_usage_errors(goldens, args, message):
    d, _, _ = goldens
    result = runner.invoke(update_app(), ["update", str(d), *args])
    assert result.exit_code == 2 and message in result.output


def test_cli_refuses_a_directory_without_goldens(tmp_path):
    result = runner.invoke(update_app(), ["update", str(tmp_path), "--server", "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "no goldens" in result.output


def test_unreachable_server_is_an_error_before_any_golden_is_touched(goldens):
    d, _, _ = goldens
    before = snapshot(d)
    result = runner.invoke(update_app(), ["update", str(d), "--server", "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "cannot connect" in result.output
    assert snapshot(d) == before


def test_report_dir_keeps_goldens_of_the_same_name_in_different_directories_apart(tmp_path):
    d = tmp_path / "goldens"
    h200 = record_golden(d / "h200" / "qwen.zarr")
    b200 = record_golden(d / "b200" / "qwen.zarr", spec=replace(SMALL, seed=4))
    with StubServer(StubConfig(radix=False, tamper=drift_on(h200))) as stub:
        res = runner.invoke(update_app(), ["update", str(d), "--server", stub.url, "--dry-run",
                                           "--report-dir", str(tmp_path / "r")])
    assert res.exit_code == 1, res.output
    h200_report = (tmp_path / "r" / "h200" / "qwen.zarr.json").read_text()
    b200_report = (tmp_path / "r" / "b200" / "qwen.zarr.json").read_text()
    assert str(h200) in h200_report and '"verdict": "fail"' in h200_report
    assert str(b200) in b200_report and '"verdict": "pass"' in b200_report
