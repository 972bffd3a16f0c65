"""Every /generate body the client sends to an SGLang release is one that release's own
`GenerateReqInput` takes (pydantic validation, then `normalize_batch_and_arguments`, as its HTTP
server does), for record and replay, with and without top-k, prompt logprobs and a cache key; and
no key the client relies on is one the release would silently drop.

The bodies are captured from real `golden record` / `golden replay` runs against a stub that
reports the release's version, and judged by the release's own code (tests/support/
sglang_release_check.py on SGLang's venv Python). Needs `bash scripts/fetch_sglang_releases.sh`
and `bash scripts/install_sglang.sh` (scripts/test.sh runs both).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.server.apis.base import RequestExtras
from replay.server.apis.sglang import SGLangApi, generate_body
from replay.server.apis.sglang_wire import FLAT_KEYS, NEWEST, wire_for
from replay.sglang_frontend.locate import install_hint, sglang_python
from tests.support import paths
from tests.support.goldens import SMALL_TREE
from tests.support.stub_server import StubConfig, StubServer

FETCH = paths.REPO / "scripts" / "fetch_sglang_releases.sh"
CHECK = paths.REPO / "tests" / "support" / "sglang_release_check.py"
RELEASES_DIR = Path(subprocess.run(["bash", str(FETCH), "--dir"], capture_output=True,
                                   text=True, check=True).stdout.strip())
RELEASES = subprocess.run(["bash", str(FETCH), "--releases"], capture_output=True, text=True,
                          check=True).stdout.split()
FLAT_OUTPUT = {"0.5.22", "0.5.23"}  # the releases with return_flat_raw_output_top_logprobs

pytestmark = [
    pytest.mark.skipif(sglang_python() is None, reason=install_hint()),
    pytest.mark.skipif(not all((RELEASES_DIR / v / ".unpacked").exists() for v in RELEASES),
                       reason=f"the SGLang releases are not unpacked: bash {FETCH}"),
]
runner = CliRunner()


def judged(version: str, bodies: list[dict]) -> dict:
    """The release's own verdict on each body (tests/support/sglang_release_check.py)."""
    env = {**os.environ, "PYTHONPATH": str(RELEASES_DIR / version)}
    done = subprocess.run([sglang_python(), str(CHECK)], input=json.dumps(bodies), env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["version"] == version, out  # the release's own code judged, not the venv's
    return out


def record_and_replay_bodies(tmp_path: Path, version: str, scenario: str) -> list[dict]:
    """The bodies of `golden record` and `golden replay` of `scenario` against a stub reporting
    SGLang `version` (record cache-off, replay with a radix cache)."""
    toml = tmp_path / "s.toml"
    toml.write_text(scenario)
    out = tmp_path / "s.zarr"
    info = {"version": version}
    with StubServer(StubConfig(radix=False, extra_server_info=info)) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", str(toml),
                                  "--out", str(out), "--quiet"])
        assert res.exit_code == 0, res.output
        bodies = list(stub.bodies)
    with StubServer(StubConfig(extra_server_info=info)) as stub:
        res = runner.invoke(app, ["replay", str(out), "--server", stub.url, "--quiet",
                                  "--expect-cache", "none"])
        assert res.exit_code in (0, 1), res.output
        bodies += stub.bodies
    return bodies


def extras_bodies(version: str) -> list[dict]:
    """The bodies that ask for prompt logprobs and a cache key, as the adapter for `version`
    builds them (the stub cannot answer prompt logprobs, so these are built, not captured)."""
    api = SGLangApi(wire_for(version))
    ids = np.arange(1, 40, dtype=np.int32)
    return [api.extras_request(ids, 8, k, RequestExtras(start, key))[1]
            for k in (0, 5) for start, key in ((12, None), (-1, "salt-1"), (0, "salt-2"))]


@pytest.fixture(scope="module", params=RELEASES)
def release(request, tmp_path_factory) -> tuple[str, list[dict], list[dict]]:
    """One release: the bodies of a record and a replay of a small salted tree (top-k 5) and the
    extras bodies, with that release's verdict on each (one checker run per release)."""
    version = request.param
    bodies = record_and_replay_bodies(tmp_path_factory.mktemp(f"sglang-{version}"), version,
                                      SMALL_TREE + "salted = 1\n")
    bodies += extras_bodies(version)
    return version, bodies, judged(version, bodies)["verdicts"]


def test_every_body_of_a_record_and_a_replay_is_taken_by_the_releases_own_request_class(release):
    _, bodies, verdicts = release
    refused = [(b, v["error"]) for b, v in zip(bodies, verdicts) if not v["accepted"]]
    assert not refused, refused[:2]


def test_no_key_the_client_relies_on_is_dropped_by_the_release(release):
    _, bodies, verdicts = release
    for body, verdict in zip(bodies, verdicts):
        relied_on = {k for k in body if k not in FLAT_KEYS}  # the flat form is optional
        assert relied_on <= set(verdict["kept"]), sorted(relied_on - set(verdict["kept"]))


def test_the_flat_top_k_form_is_asked_exactly_where_the_release_has_it(release):
    version, bodies, verdicts = release
    with_top_k = [(b, v) for b, v in zip(bodies, verdicts) if b["top_logprobs_num"] > 0]
    assert with_top_k
    for body, verdict in with_top_k:
        asked = {k for k in body if k in FLAT_KEYS}
        assert bool(asked) == (version in FLAT_OUTPUT)
        assert asked <= set(verdict["kept"])  # asked only where the release knows it


def test_the_body_of_the_form_before_this_fix_is_refused_by_0_5_17():
    """The check has teeth: the body every release got before the wire followed the version is
    the HTTP 400 the H200 run saw (docs/apis.md, "SGLang top-k, flat or nested, by release")."""
    body = generate_body(np.arange(1, 9, dtype=np.int32), 4, 5, NEWEST)
    verdict = judged("0.5.17", [body])["verdicts"][0]
    assert not verdict["accepted"]
    assert verdict["error"] == "return_flat_raw_top_logprobs_b64 requires return_flat_raw_top_logprobs."
