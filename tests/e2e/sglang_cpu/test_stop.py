"""A `golden record --launch sglang-cpu-reference` that is signalled while SGLang's real server
is serving leaves none of that server's processes behind (its HTTP server, the scheduler and the
detokenizer SGLang starts as child processes): SIGTERM stops them before golden exits 2, and
golden's own death (SIGKILL) is handled by the launch's watchdog. One server start each.
Needs `bash scripts/install_sglang_cpu.sh` (scripts/test.sh runs it); skipped otherwise.
"""

from __future__ import annotations

import signal

import pytest

from replay.sglang_cpu.locate import default_venv, install_hint
from replay.sglang_cpu.tiny_model import write_tiny_llama
from tests.support.stopping import record_and_signal

STAMP = default_venv() / ".golden-sglang-cpu-installed"
pytestmark = pytest.mark.skipif(not STAMP.is_file(), reason=install_hint())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_signalled_golden_stops_sglangs_whole_server(tmp_path, sig):
    model = write_tiny_llama(tmp_path / "tiny-llama", seed=0)
    result = record_and_signal(tmp_path, "sglang-cpu-reference", str(model), sig)
    assert result.has_process("sglang::scheduler"), result.commands
    assert result.has_process("sglang::detokenizer"), result.commands
    assert result.left == frozenset(), [c for c in result.commands if c]
    if sig == signal.SIGKILL:
        assert result.returncode == -signal.SIGKILL
    else:
        assert result.returncode == 2, result.stderr[-2000:]
        assert result.stderr.strip().splitlines()[-1].startswith("error: interrupted")
