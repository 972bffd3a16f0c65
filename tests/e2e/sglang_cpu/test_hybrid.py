"""End to end: a Gated DeltaNet hybrid (the tiny Qwen3-Next of replay/sglang_cpu/tiny_model.py)
on SGLang 0.5.23's REAL CPU server, its radix cache over KV and Mamba states and HiCache's host
pools for both (sglang-cpu-hybrid-* profiles; docs/sglang-cpu.md, "The hybrid").

Which tests exist follows the CPU: sgl-kernel's GDN ops have AVX-512 code only, so on a CPU
without AVX-512 BF16 the one test is that the launcher refuses a hybrid in one line; on one with
it, what was found (collected this way, nothing is skipped on either):

- with the radix cache off, a prefill landing while another request decodes leaves that
  request's tokens alone (scripts/sglang_cpu/hybrid_midprefill_repro.py): it did not before the
  Mamba pool had the conv-state layout of the CPU ops (replay/sglang_cpu/hybrid.py, patch 3);
- the first turns replay bit for bit on HiCache; every follow-up is served from the host tier
  (the parent's KV and Mamba state went to host and came back) and diverges from position 0;
- the radix-only control serves the same hits from the device with the very same values, so the
  host round trip changed nothing and the divergence is not HiCache's: the parent's decode steps
  wrote that KV and state, and the reference's prefill computes them with other bits.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli.main import app
from replay.server.launch import launched
from replay.server.profile import load_profile
from replay.sglang_cpu.locate import install_hint
from replay.sglang_cpu.tiny_model import write_tiny_qwen3_next
from tests.support import paths
from tests.support.sglang_cpu import ORDER, STAMP, Replayed, replay, requests, runner

pytestmark = pytest.mark.skipif(not STAMP.is_file(), reason=install_hint())
SCRIPTS = paths.REPO / "scripts" / "sglang_cpu"


def build_kernel():
    spec = importlib.util.spec_from_file_location("build_kernel", SCRIPTS / "build_kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GDN_OPS_BUILT = build_kernel().has_avx512(build_kernel().machine_cpuinfo())


@pytest.fixture(scope="module")
def hybrid_model(tmp_path_factory) -> str:
    return str(write_tiny_qwen3_next(tmp_path_factory.mktemp("hybrid") / "tiny-qwen3-next"))


if not GDN_OPS_BUILT:
    def test_the_launcher_refuses_a_hybrid_in_one_line_on_a_cpu_without_avx512(hybrid_model):
        proc = subprocess.run(
            [sys.executable, "-m", "replay.sglang_cpu", "--model-path", hybrid_model,
             "--host", "127.0.0.1", "--port", "9", "--device", "cpu"],
            cwd=paths.REPO, capture_output=True, text=True, timeout=600)
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 2
        assert last.startswith("error: ") and "AVX-512 BF16" in last and "hint:" in last


if GDN_OPS_BUILT:
    @pytest.fixture(scope="module")
    def hybrid(hybrid_model, tmp_path_factory) -> dict[str, Any]:
        work = tmp_path_factory.mktemp("hybrid-runs")
        golden = work / "cpu-branching.zarr"
        with launched(load_profile("sglang-cpu-hybrid-reference"), model=hybrid_model,
                      log_path=work / "reference.log") as url:
            res = runner.invoke(app, [
                "record", "--server", url, "--scenario", "cpu-branching", "--out", str(golden),
                *ORDER])
            assert res.exit_code == 0, res.output
            repro = subprocess.run([sys.executable, str(SCRIPTS / "hybrid_midprefill_repro.py"),
                                    url, "0.3", "0.6"], capture_output=True, text=True,
                                   timeout=900)
        with launched(load_profile("sglang-cpu-hybrid-hicache"), model=hybrid_model,
                      log_path=work / "hicache.log") as url:
            hicache = replay(url, golden, work / "hicache.json")
        with launched(load_profile("sglang-cpu-hybrid-radix"), model=hybrid_model,
                      log_path=work / "radix.log") as url:
            radix = replay(url, golden, work / "radix.json")
        return {"repro": repro, "hicache": hicache, "radix": radix}

    def turn(request: dict[str, Any]) -> int:
        return int(request["id"].rsplit("/t", 1)[1])

    def test_a_prefill_landing_mid_decode_leaves_the_other_requests_tokens_alone(hybrid):
        repro = hybrid["repro"]
        assert repro.returncode == 0, repro.stderr
        assert repro.stdout.splitlines() == ["delay 0.3: identical", "delay 0.6: identical"]

    def test_first_turns_replay_bit_for_bit_on_hicache(hybrid):
        firsts = [q for q in requests(hybrid["hicache"].doc) if turn(q) == 0]
        assert len(firsts) == 4
        assert {q["status"] for q in firsts} == {"identical"}

    def test_every_follow_up_is_served_whole_from_the_host_tier(hybrid):
        doc = hybrid["hicache"].doc
        follow_ups = [q for q in requests(doc) if turn(q) == 1]
        assert [q["cached_tokens"] for q in follow_ups] == [735] * 4  # 576 prompt + 159 decoded
        assert doc["summary"]["cached_tokens_by_tier"] == {"host": 4 * 735}

    def test_follow_ups_diverge_from_position_0_and_the_radix_control_has_the_same_values(
            hybrid):
        def divergences(r: Replayed) -> dict[str, Any]:
            return {q["id"]: (q["status"], q["cached_tokens"], q["max_ulp"],
                              (q.get("first_divergence") or {}).get("position"))
                    for q in requests(r.doc)}

        hicache, radix = hybrid["hicache"], hybrid["radix"]
        assert hicache.code == 1 and hicache.doc["summary"]["requests_failed"] == 4
        assert {v[3] for k, v in divergences(hicache).items() if k.endswith("/t1")} == {0}
        assert radix.doc["summary"]["cached_tokens_by_tier"] == {"device": 4 * 735}
        assert divergences(radix) == divergences(hicache)
