"""Each engine installer's package list is complete on its own: SGLang goes in with --no-deps
(its pins would pull the CUDA torch), so every distribution its start-up imports at module level
must be named by the installer, over what `pip install golden-replay[engine]` and the named
packages' own dependencies bring. The list was once complete only beside the llama.cpp
converter's packages (scripts/build_llama_server.sh --python-deps-only): in a venv holding only
golden-replay[engine], `bash scripts/install_sglang.sh` died on `No module named 'sentencepiece'`.

STARTUP_IMPORTS is read from sglang 0.5.23's wheel (`pip download --no-deps sglang==0.5.23`): the
module-level, unguarded imports on the paths from the modules each installer's own import check
names (sglang.srt.entrypoints.http_server, the tokenizer and detokenizer managers; the CPU server
adds the scheduler and the host KV pool), less what golden-replay[engine] and the listed packages
resolve to (`pip install --dry-run --report`) and torchvision (a stub). Raise the pin: read them again.
vLLM and the router install with their dependencies (pip resolves what they declare), so only
the two SGLang installers are held to a list here.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support import paths

STARTUP_IMPORTS = {  # distribution: where SGLang 0.5.23 imports it at start-up
    "sentencepiece": "sglang.srt.configs.internvl (through utils.hf_transformers.common)",
    "ipython": "sglang.utils (IPython.display, imported by sglang/__init__)",
    "jsonschema": "sglang.srt.entrypoints.openai.serving_chat",
    "orjson": "sglang.srt.utils.common",
    "zstandard": "sglang.srt.entrypoints.http_request_decompression",
    "transformers": "sglang.srt.utils.hf_transformers.tokenizer",
    "fastapi": "sglang.srt.managers.tokenizer_manager",
    "uvloop": "sglang.srt.managers.tokenizer_manager",
    "pyzmq": "sglang.srt.managers.detokenizer_manager",
    "setproctitle": "sglang.srt.managers.detokenizer_manager",
    "dill": "sglang.srt.sampling.custom_logit_processor",
    "partial-json-parser": "sglang.srt.function_call.base_format_detector",
    "soundfile": "sglang.srt.entrypoints.openai.streaming_asr",
    "apache-tvm-ffi": "sglang.kernels.ops.communication.all_reduce",
    "xgrammar": "sglang.srt.function_call.kimik3_detector",
}
CPU_SERVER_IMPORTS = {"prometheus-client", "xxhash", "interegular", "llguidance", "ninja"}


def listed_packages(script: str, tmp_path: Path) -> list[str]:
    """`--packages`, with no interpreter and the venvs in tmp_path: a script that did not know the
    flag stops at `cannot run` instead of installing into the user's cache."""
    env = {**os.environ, "PYTHON": str(tmp_path / "no-python"), "HOME": str(tmp_path),
           "GOLDEN_SGLANG_VENV": str(tmp_path / "sglang"),
           "GOLDEN_SGLANG_CPU_VENV": str(tmp_path / "sglang-cpu")}
    listed = subprocess.run(["bash", str(paths.REPO / "scripts" / script), "--packages"],
                            capture_output=True, text=True, env=env, timeout=30)
    assert listed.returncode == 0, listed.stderr
    return [line for line in listed.stdout.splitlines() if line.strip()]


def package_names(script: str, tmp_path: Path) -> set[str]:
    return {re.split(r"[=<>!~ ;\[]", line, maxsplit=1)[0].lower().replace("_", "-")
            for line in listed_packages(script, tmp_path)}


@pytest.mark.parametrize("script", ["install_sglang.sh", "install_sglang_cpu.sh"])
def test_the_sglang_installers_name_every_package_its_start_up_imports(script, tmp_path):
    missing = set(STARTUP_IMPORTS) - package_names(script, tmp_path)
    assert not missing, {name: STARTUP_IMPORTS[name] for name in missing}


def test_the_cpu_installer_also_names_what_the_scheduler_imports(tmp_path):
    assert CPU_SERVER_IMPORTS <= package_names("install_sglang_cpu.sh", tmp_path)


def test_sentencepiece_is_pinned_where_sglang_pins_it(tmp_path):
    assert "sentencepiece==0.2.1" in listed_packages("install_sglang.sh", tmp_path)
