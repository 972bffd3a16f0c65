"""No wrong verdicts and no leaked secrets when servers, goldens or arguments misbehave."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.support.goldens import record_scenario
from tests.support.stub_server import StubConfig, StubServer

runner = CliRunner()
SECRET = "sk-test-0123456789abcdef"


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    return record_scenario(tmp_path_factory.mktemp("g"), "deep", "deep")


def replay(golden: Path, config: StubConfig, *extra: str, env=None):
    with StubServer(config) as stub:
        res = runner.invoke(app, ["replay", str(golden), "--server", stub.url, "-q", *extra], env=env)
    return res, stub


def test_http_429_is_retried_and_then_succeeds(golden):
    res, _ = replay(golden, StubConfig(statuses=[429, 503]))
    assert res.exit_code == 0, res.output


def test_http_429_that_never_stops_is_an_error(golden):
    res, _ = replay(golden, StubConfig(statuses=[429] * 50))
    assert res.exit_code == 2 and "HTTP 429" in res.output


def test_connection_reset_mid_body_is_an_error_not_retried(golden):
    res, stub = replay(golden, StubConfig(reset=True))
    assert res.exit_code == 2 and "error: " in res.stderr
    assert stub.requests == 0 and len(stub.auth_headers) == 1  # sent once, never retried


def test_slow_server_times_out_as_an_error(golden):
    res, _ = replay(golden, StubConfig(delay=2.0), "--timeout", "0.3")
    assert res.exit_code == 2 and "within 0.3 s" in res.output


def test_flush_cache_busy_is_retried_briefly(golden):
    res, _ = replay(golden, StubConfig(flush_busy=3))
    assert res.exit_code == 0, res.output


def test_api_key_is_sent_as_bearer_and_never_written(golden, tmp_path):
    report = tmp_path / "r.json"
    junit = tmp_path / "j.xml"
    res, stub = replay(golden, StubConfig(fail_status=None), "--report", str(report),
                       "--junit", str(junit), env={"GOLDEN_API_KEY": SECRET})
    assert res.exit_code == 0
    assert set(stub.auth_headers) == {f"Bearer {SECRET}"}
    assert SECRET not in res.output
    assert SECRET not in report.read_text() and SECRET not in junit.read_text()


def test_api_key_never_reaches_a_golden_or_an_error_message(tmp_path):
    out = tmp_path / "k.zarr"
    cfg = StubConfig(radix=False, extra_server_info={"api_key": SECRET,
                                                     "launch_command": f"serve --api-key {SECRET}"})
    with StubServer(cfg) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                  "--out", str(out), "--api-key", SECRET, "-q"])
    assert res.exit_code == 0, res.output
    for f in out.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f
    res = runner.invoke(app, ["replay", str(out), "--server", "http://127.0.0.1:9",
                              "--api-key", SECRET, "-q"])
    assert res.exit_code == 2 and SECRET not in res.output


def test_credentials_in_the_server_url_are_not_reported(golden, tmp_path):
    report = tmp_path / "r.json"
    with StubServer(StubConfig()) as stub:
        url = stub.url.replace("http://", f"http://user:{SECRET}@")
        runner.invoke(app, ["replay", str(golden), "--server", url, "--report", str(report), "-q"])
    assert SECRET not in report.read_text()


@pytest.mark.parametrize("command", ["verify", "show", "replay", "diff"])
def test_a_directory_that_is_not_a_golden_is_an_error_for_every_command(tmp_path, command):
    bogus = tmp_path / "nothing.zarr"
    bogus.mkdir()
    args = {"verify": ["verify", str(bogus)], "show": ["show", str(bogus)],
            "replay": ["replay", str(bogus), "--server", "http://127.0.0.1:9", "-q"],
            "diff": ["diff", str(bogus), str(bogus)]}[command]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "nothing.zarr" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("command", ["verify", "replay"])
def test_a_bit_flipped_golden_is_an_error(golden, tmp_path, command):
    copy = tmp_path / "flipped.zarr"
    shutil.copytree(golden, copy)
    chunk = max((p for p in (copy / "logprobs").rglob("*") if p.is_file() and p.name != "zarr.json"),
                key=lambda p: p.stat().st_size)
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chunk.write_bytes(bytes(data))
    args = ["verify", str(copy)] if command == "verify" else \
        ["replay", str(copy), "--server", "http://127.0.0.1:9", "-q"]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "logprobs" in res.output


def test_a_newer_schema_is_refused(golden, tmp_path):
    copy = tmp_path / "newer.zarr"
    shutil.copytree(golden, copy)
    meta = copy / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["schema"] = "golden-replay/golden/99"
    meta.write_text(json.dumps(doc))
    res = runner.invoke(app, ["verify", str(copy)])
    assert res.exit_code == 2 and "newer" in res.output


def test_missing_golden_is_an_error(tmp_path):
    res = runner.invoke(app, ["show", str(tmp_path / "absent.zarr")])
    assert res.exit_code == 2 and "absent.zarr" in res.output
