"""`golden record` and `golden replay` talk to the SGLang release the server runs: the top-k form
follows its reported version, and a refusal of the flat form is answered by asking nested (the
H200 run against SGLang 0.5.17 stopped with HTTP 400: docs/apis.md, by release). The bodies are
checked against the releases' own request classes in tests/e2e/sglang_wire/."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.server.apis.sglang_wire import FLAT_KEYS
from tests.support.goldens import SMALL_TREE, record_scenario
from tests.support.stub_server import StubConfig, StubServer

runner = CliRunner()


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Path:
    return record_scenario(tmp_path_factory.mktemp("g"), SMALL_TREE)


def replay(golden: Path, config: StubConfig) -> tuple[int, list[dict]]:
    with StubServer(config) as stub:
        res = runner.invoke(app, ["replay", str(golden), "--server", stub.url, "--quiet"])
        return res.exit_code, list(stub.bodies)


def test_a_replay_against_0_5_17_asks_for_nested_top_k_and_passes(golden):
    code, bodies = replay(golden, StubConfig(refuse_b64_alone=True,
                                             extra_server_info={"version": "0.5.17"}))
    assert code == 0
    assert bodies and not any(k in b for b in bodies for k in FLAT_KEYS)


def test_a_replay_against_0_5_23_asks_for_flat_top_k(golden):
    code, bodies = replay(golden, StubConfig(extra_server_info={"version": "0.5.23"}))
    assert code == 0
    assert all(b.get("return_flat_raw_output_top_logprobs") for b in bodies)


def test_a_server_that_refuses_the_flat_form_gets_each_refused_body_again_nested(golden):
    """No version reported, flat asked, 400 naming the flat key: each refused request is sent
    once more, nested, and the replay passes (one extra body per refusal, no more)."""
    code, bodies = replay(golden, StubConfig(refuse_b64_alone=True))
    assert code == 0
    flat = [b for b in bodies if any(k in b for k in FLAT_KEYS)]
    nested = [b for b in bodies if not any(k in b for k in FLAT_KEYS)]
    assert flat and len(nested) == 12  # every request of SMALL_TREE answered once
    assert len(flat) <= 4  # only those in flight before the first refusal came back


def test_record_against_0_5_17_writes_a_golden(tmp_path):
    (tmp_path / "s.toml").write_text(SMALL_TREE)
    with StubServer(StubConfig(radix=False, refuse_b64_alone=True,
                               extra_server_info={"version": "0.5.17"})) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario",
                                  str(tmp_path / "s.toml"), "--out", str(tmp_path / "g.zarr"),
                                  "--quiet"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "g.zarr").exists()
