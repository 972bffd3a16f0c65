"""Model identity: the same model under a local path and a hub id is the same model; a different
model (name, architecture or weight version) is not, and the replay refuses it (exit 2)."""

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.golden.fingerprint import ModelIdentity, model_identity, model_mismatch
from tests.support.stub_server import StubConfig, StubServer

HUB = ModelIdentity("Qwen/Qwen3-8B", "Qwen/Qwen3-8B", ("Qwen3ForCausalLM",), "default")


@pytest.mark.parametrize("path", [
    "/data/models/Qwen3-8B",
    "/data/models/Qwen3-8B/",
    "/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/0123abcd",
])
def test_a_local_copy_of_a_hub_model_is_the_same_model(path):
    local = ModelIdentity(path, path, ("Qwen3ForCausalLM",), "default")
    assert model_mismatch(HUB, local) is None
    assert model_mismatch(local, HUB) is None


def test_the_served_model_name_also_identifies_the_model():
    local = ModelIdentity("/mnt/ckpt/step-1000", "Qwen3-8B", ("Qwen3ForCausalLM",))
    assert model_mismatch(HUB, local) is None


def test_a_different_model_is_a_mismatch():
    other = ModelIdentity("meta-llama/Llama-3.1-8B", None, ("LlamaForCausalLM",))
    assert "serves 'meta-llama/Llama-3.1-8B'" in model_mismatch(HUB, other)


def test_the_same_name_with_another_architecture_is_a_mismatch():
    other = ModelIdentity("/other/Qwen3-8B", None, ("LlamaForCausalLM",))
    assert "architectures" in model_mismatch(HUB, other)


def test_other_weights_under_the_same_path_are_a_mismatch():
    updated = ModelIdentity("Qwen/Qwen3-8B", None, ("Qwen3ForCausalLM",), "step-2000")
    assert "weight version 'step-2000'" in model_mismatch(HUB, updated)


def test_an_unknown_side_cannot_mismatch():
    assert model_mismatch(ModelIdentity(None), HUB) is None


def test_identity_is_read_from_model_info_then_server_info():
    found = model_identity({"served_model_name": "m", "architectures": ["A"]},
                           {"model_path": "/p/m", "weight_version": "v1"})
    assert found == ModelIdentity("/p/m", "m", ("A",), "v1")


def test_replay_accepts_the_recorded_hub_model_under_a_local_path(tmp_path):
    runner = CliRunner()
    (tmp_path / "s.toml").write_text("groups = 1\nbranches = 1\nprefix_len = 20\nsuffix_len = 4\n"
                                     "turns = 1\nturn_suffix_len = 2\nmax_new_tokens = 4\ntop_k = 1\n")
    golden = tmp_path / "s.zarr"
    with StubServer(StubConfig(radix=False, model_path="Org/Tiny-1B")) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario",
                                  str(tmp_path / "s.toml"), "--out", str(golden), "--quiet"])
        assert res.exit_code == 0, res.output
    for path, code in (("/srv/models/Tiny-1B", 0), ("Org/Other-1B", 2)):
        with StubServer(StubConfig(model_path=path)) as stub:
            res = runner.invoke(app, ["replay", str(golden), "--server", stub.url, "--quiet"])
        assert res.exit_code == code, (path, res.output)

