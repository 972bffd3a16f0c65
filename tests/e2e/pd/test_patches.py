"""The PD patches (replay/sglang_cpu/disaggregation.py) against SGLang 0.5.23's own modules
(the pure parts are unit-tested in tests/unit/sglang_cpu/test_disaggregation.py).

SGLang's disaggregation modules import what only the CPU server's venv has (prometheus_client,
Mooncake), so what touches them runs once, in that venv's Python (scripts/install_sglang_cpu.sh;
scripts/test.sh installs it), and reports what it saw; the tests read that report.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from replay.sglang_cpu.locate import default_venv, install_hint
from tests.support import paths

PROBE = textwrap.dedent("""
    import json, sys
    from types import SimpleNamespace
    import numpy as np, torch
    import sglang.srt.utils
    from sglang.srt.disaggregation.mooncake import conn
    from replay.sglang_cpu import disaggregation

    out = {}
    disaggregation.apply(SimpleNamespace(disaggregation_mode="null"))
    out["null_untouched"] = (conn.MooncakeKVSender.supports_host_tensor_indices is True
                             and torch.cuda.Event is not torch.cpu.Event)
    sglang.srt.utils.is_cpu = lambda: True
    for _ in range(2):
        disaggregation.apply(SimpleNamespace(disaggregation_mode="decode"))
    out["host_indices"] = conn.MooncakeKVSender.supports_host_tensor_indices
    event = torch.cuda.Event()
    event.record(); event.synchronize()
    out["cpu_event"] = torch.cuda.Event is torch.cpu.Event
    seen = []
    conn.MooncakeKVManager.send_kvcache = lambda self, s, pages, *a, **k: seen.append(pages.tolist())
    for _ in range(2):
        disaggregation.arm_transfer_fault("wrong-page-offset")
    conn.MooncakeKVManager.send_kvcache(None, "s", np.array([1, 2]), [], np.array([5, 6]), None)
    out["sent"] = seen
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def probe() -> tuple[dict, str]:
    python = default_venv() / "bin" / "python"
    if not python.is_file():
        pytest.skip(install_hint())
    env = dict(os.environ, PYTHONPATH=str(paths.REPO))
    proc = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True,
                          timeout=300, env=env, cwd=paths.REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_a_server_without_disaggregation_is_not_touched(probe):
    assert probe[0]["null_untouched"] is True


def test_a_pd_server_computes_page_indices_in_line(probe):
    assert probe[0]["host_indices"] is False


def test_a_pd_server_gets_torchs_cpu_event_for_cuda_events(probe):
    assert probe[0]["cpu_event"] is True


def test_each_patch_logs_itself_once(probe):
    err = probe[1]
    assert err.count("supports_host_tensor_indices = False") == 1
    assert err.count("torch.cuda.Event = torch.cpu.Event") == 1
    assert err.count("FAULT armed") == 1


def test_the_fault_switch_wraps_mooncakes_send_and_logs_each_corrupted_chunk(probe):
    assert probe[0]["sent"] == [[1, 1]]
    assert "page 2 sent from page 1" in probe[1]
