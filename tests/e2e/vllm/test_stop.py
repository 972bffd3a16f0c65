"""A `golden record --launch vllm-reference` that is interrupted (SIGINT, a Ctrl-C) while vLLM's
real server is serving leaves none of its processes behind: the API server and the EngineCore
process vLLM starts for the model. One server start.
"""

from __future__ import annotations

import signal

from tests.e2e.vllm.kit import skip_without_vllm, tiny_model
from tests.support.stopping import record_and_signal

pytestmark = skip_without_vllm()


def test_an_interrupted_golden_stops_vllms_whole_server(tmp_path):
    result = record_and_signal(tmp_path, "vllm-reference", tiny_model("tiny-llama"), signal.SIGINT)
    assert result.has_process("EngineCore"), result.commands
    assert result.left == frozenset(), [c for c in result.commands if c]
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: interrupted")
