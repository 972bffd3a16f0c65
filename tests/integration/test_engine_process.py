"""The embedded engine as its own process: `python -m replay.engine` serves and stops on SIGTERM,
and a fresh interpreter on other CPU kernels (ATEN_CPU_CAPABILITY) computes the same bits."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.support import paths
from tests.unit.engine.test_http import call

REPO = paths.REPO


def test_python_m_replay_engine_serves_and_exits_on_sigterm():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "replay.engine", "--profile", "hicache", "--port", "0"],
        cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()  # blocks until the server announces itself
        match = re.search(r"http://\S+", line)
        assert match, f"no URL in {line!r}"
        assert call(match.group(0), "/health")[0] == 200
        info = json.loads(call(match.group(0), "/server_info")[1])
        assert info["enable_hierarchical_cache"] and info["launch_command"].startswith("python -m replay.engine")
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert time.monotonic() - started < 60
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


CAPABILITY_SCRIPT = """
import hashlib, json, numpy as np, torch
from replay.engine.config import get_config
from replay.engine.model import ForwardItem, HybridModel
model = HybridModel(get_config("tiny"), seed=0)
c = model.config
toks = torch.from_numpy(np.random.Generator(np.random.PCG64(36)).integers(0, c.vocab_size, 40))
kv = [(torch.zeros(0, c.n_kv_heads, c.head_dim), torch.zeros(0, c.n_kv_heads, c.head_dim))] * c.attn_layers
[r] = model.forward([ForwardItem(toks, 0, kv, model.empty_ssm())])
digest = hashlib.sha256(r.logprobs.numpy().tobytes())
for s in r.ssm:
    digest.update(s.h.numpy().tobytes())
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "digest": digest.hexdigest()}))
"""


def run_with_capabilities(capabilities: list[str]) -> list[dict]:
    """Run CAPABILITY_SCRIPT once per capability, concurrently, each in a fresh interpreter."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", CAPABILITY_SCRIPT],
            env=os.environ | {"ATEN_CPU_CAPABILITY": capability, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for capability in capabilities
    ]
    reports = []
    for run in runs:
        out, err = run.communicate(timeout=180)
        assert run.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def test_cpu_capability_does_not_change_bits() -> None:
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("this CPU has no AVX2 to compare against the default kernels")
    default, avx2 = run_with_capabilities(["default", "avx2"])
    assert (default["capability"], avx2["capability"]) == ("DEFAULT", "AVX2")
    assert default["digest"] == avx2["digest"]
