"""The weightless model directory the SGLang front end serves: it names the same model as the
engine's own server (so goldens move between the two) and its tokenizer maps word `t<i>` to id i.
No SGLang needed."""

from __future__ import annotations

import json
import urllib.request

import pytest

from replay.engine.config import get_config
from replay.engine.options import profile_options
from replay.engine.server import start_server
from replay.sglang_frontend.model_dir import ARCHITECTURE, engine_model, write_model_dir


def test_the_directory_names_the_model_as_the_engines_own_server_does(tmp_path):
    path = write_model_dir(tmp_path, get_config("tiny"), 0)
    with start_server(profile_options("reference")) as server:
        with urllib.request.urlopen(server.url + "/model_info", timeout=30) as response:
            native = json.load(response)
    assert path.relative_to(tmp_path).as_posix() == native["model_path"]
    assert [ARCHITECTURE] == native["architectures"]
    config = json.loads((path / "config.json").read_text())
    assert engine_model(config) == ("tiny", 0)
    assert config["hybrid_override_pattern"] == "M*M*"  # ssm, attn, ssm, attn as in the engine


def test_the_tokenizer_maps_word_i_to_token_i(tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers package is not installed (pip install tokenizers; bash scripts/test.sh installs it)")
    path = write_model_dir(tmp_path, get_config("tiny"), 0)
    tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
    assert tokenizer.encode("t5 t4095 t0").ids == [5, 4095, 0]
    assert tokenizer.get_vocab_size() == get_config("tiny").vocab_size


def test_writing_twice_leaves_the_same_files(tmp_path):
    first = write_model_dir(tmp_path, get_config("tiny"), 0)
    before = {p.name: p.read_text() for p in first.iterdir()}
    second = write_model_dir(tmp_path, get_config("tiny"), 0)
    assert second == first and {p.name: p.read_text() for p in second.iterdir()} == before
