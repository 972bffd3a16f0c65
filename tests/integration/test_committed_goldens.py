"""CI comparing against committed goldens: every golden in goldens/ (recorded on the embedded
engine's `reference` profile) is sound, and replays bit for bit, with real cache hits, against a
real `hicache` engine process (host tier, tight device pool, overlap scheduling)."""


import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.golden.store import read_golden, verify_golden
from tests.support import paths

GOLDENS = sorted((paths.REPO / "goldens").glob("*.zarr"))
runner = CliRunner()


def test_the_presets_have_committed_goldens():
    assert {g.stem for g in GOLDENS} >= {"hicache-branching", "single", "deep", "wide"}


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: p.stem)
def test_committed_golden_is_sound(golden):
    assert verify_golden(golden) == []
    g = read_golden(golden)
    assert g.meta["model_info"]["model_path"] == "embedded/hybrid-tiny@seed0"
    assert g.meta["server_info"]["disable_radix_cache"] is True


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: p.stem)
def test_committed_golden_replays_exactly_on_hicache(golden, tmp_path):
    report = tmp_path / "report.json"
    res = runner.invoke(app, ["replay", str(golden), "--launch", "embedded-hicache",
                              "--log-dir", str(tmp_path), "--report", str(report), "-q"])
    assert res.exit_code == 0, res.output
