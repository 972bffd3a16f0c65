"""Small goldens recorded for tests, through the real CLI against the in-process stub."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from golden_cli.main import app
from tests.support.stub_server import StubConfig, StubServer


def record_single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `single` preset recorded from a cache-disabled stub by `golden record`."""
    out = tmp_path_factory.mktemp("g") / "single.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        res = CliRunner().invoke(app, ["record", "--server", stub.url, "--scenario", "single",
                                       "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    return out
