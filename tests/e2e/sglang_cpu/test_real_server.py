"""End to end on SGLang 0.5.23's REAL server on a CPU: its HTTP server, Scheduler, ModelRunner,
radix cache and HiCache (host pool, write-through, eviction to host, load back), started by the
sglang-cpu-* launch profiles (`python -m replay.sglang_cpu`, docs/sglang-cpu.md) with a tiny
random-weight Llama (bf16, seed 0). What is asserted is what was found (docs/findings.md, "SGLang's
real server on a CPU"):

- prompt-only reuse (cpu-prompt-reuse: 8 groups x 4 branches, a 576-token prefix each, interleaved
  so that 8 prefixes outgrow the 4,096-token device pool) replays bit for bit, with hits served
  from the host tier, in both repeats; the flush between repeats really empties the cache;
- multi-turn reuse (cpu-branching): every follow-up turn's hit covers KV that its parent's decode
  steps wrote, and those follow-ups, and only those, diverge; the radix-only server gives the very
  same values, so it is not HiCache's: torch's CPU SDPA computes a decode row with other bits than
  the same row of a causal prefill.

Servers run one after another (never two at once: 2 cores), each shared by the whole module; the
goldens are recorded once per session (conftest.py).
Needs `bash scripts/install_sglang_cpu.sh` (scripts/test.sh runs it); skipped otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from replay.server.launch import launched
from replay.server.profile import load_profile
from replay.sglang_cpu.locate import install_hint
from replay.sglang_cpu.patches import LOG_PREFIX
from tests.support.sglang_cpu import STAMP, Replayed, replay, requests

pytestmark = pytest.mark.skipif(not STAMP.is_file(), reason=install_hint())
# The vector extensions torch's CPU kernels use here, and so in the server this test starts (the
# same torch, the same environment: ATEN_CPU_CAPABILITY lowers it).
AVX512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")


@pytest.fixture(scope="module")
def hicache(cpu_work, cpu_model, cpu_goldens) -> dict[str, Any]:
    log = cpu_work / "logs" / "hicache.log"
    with launched(load_profile("sglang-cpu-hicache"), model=cpu_model, log_path=log) as url:
        prompt = replay(url, cpu_goldens["cpu-prompt-reuse"], cpu_work / "hicache-prompt.json",
                        "--repeat", "2", "--require-tier", "host")
        branching = replay(url, cpu_goldens["cpu-branching"], cpu_work / "hicache-branching.json")
    return {"prompt": prompt, "branching": branching, "log": log.read_text()}


@pytest.fixture(scope="module")
def radix(cpu_work, cpu_model, cpu_goldens) -> Replayed:
    with launched(load_profile("sglang-cpu-radix"), model=cpu_model,
                  log_path=cpu_work / "logs" / "radix.log") as url:
        return replay(url, cpu_goldens["cpu-branching"], cpu_work / "radix-branching.json")


def turn(request: dict[str, Any]) -> int:
    return int(request["id"].rsplit("/t", 1)[1])


# --- prompt-only reuse through the host tier -------------------------------------------------

def test_prompt_only_reuse_replays_bit_for_bit_with_host_tier_hits(hicache):
    r = hicache["prompt"]
    assert r.code == 0, r.output
    assert r.doc["verdict"] == "pass"
    assert {q["status"] for q in requests(r.doc)} == {"identical"}
    assert r.doc["summary"]["cached_tokens_by_tier"]["host"] > 0


def test_every_repeat_starts_from_a_flushed_cache(hicache):
    """The first branch of each group finds nothing cached in either repeat: `/flush_cache`
    emptied the device pool and the host tier in between."""
    doc = hicache["prompt"].doc
    for repeat in (0, 1):
        firsts = [q["cached_tokens"] for q in requests(doc, repeat) if "/b0/" in q["id"]]
        assert firsts == [0] * 8


def test_both_repeats_get_the_same_hits_from_the_same_tiers(hicache):
    doc = hicache["prompt"].doc
    hits = [[(q["id"], q["cached_tokens"], q["cached_tokens_details"]) for q in requests(doc, rep)]
            for rep in (0, 1)]
    assert hits[0] == hits[1]


def test_cached_tokens_details_come_from_the_real_scheduler(hicache):
    """SGLang's own `meta_info.cached_tokens_details`: per tier, summing to `cached_tokens`."""
    shared = [q for q in requests(hicache["prompt"].doc) if q["cached_tokens"] > 0]
    assert shared
    for q in shared:
        assert set(q["cached_tokens_details"]) <= {"device", "host", "storage"}
        assert sum(q["cached_tokens_details"].values()) == q["cached_tokens"]


def test_every_cpu_patch_logs_itself_in_the_server_log(hicache):
    lines = [ln for ln in hicache["log"].splitlines() if ln.startswith(LOG_PREFIX)]
    assert any("ALLOC_MEMORY_FUNCS['cpu']" in ln for ln in lines)
    for op in ("transfer_kv_direct", "transfer_kv_per_layer_direct_pf_lf",
               "transfer_kv_all_layer_direct_lf_pf"):
        assert any(f"pool_host.mha.{op} =" in ln for ln in lines), op
    assert any("HostKVCache.__init__ with pin_memory=False" in ln for ln in lines)


# --- multi-turn reuse: decode-written KV -----------------------------------------------------

def test_multi_turn_hits_fail_exactly_where_they_include_decode_written_kv(hicache):
    """Which follow-ups diverge, and where, follows the CPU's vector extensions (torch's
    kernels): on AVX-512 all four at output positions 0-3; with torch held to AVX2
    (ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2) three, at 0, 3 and 19, one identical."""
    r = hicache["branching"]
    assert r.code == 1 and r.doc["verdict"] == "fail"
    reqs = requests(r.doc)
    assert {q["status"] for q in reqs if turn(q) == 0} == {"identical"}
    follow_ups = [q for q in reqs if turn(q) == 1]
    assert [q["cached_tokens"] for q in follow_ups] == [640] * 4  # 576 prompt + 64 decoded
    failed = [q for q in follow_ups if q["status"] != "identical"]
    assert failed
    assert r.doc["summary"]["cache_hit_lengths"] == {"0": 2, "512": 2, "640": 4}
    assert r.doc["summary"]["requests_failed"] == len(failed) and r.doc["summary"]["cache_misses"] == 0
    if AVX512:  # all four, within four positions
        assert len(failed) == 4
        assert all(q["first_divergence"]["position"] <= 3 for q in failed)


def test_the_radix_only_server_shows_the_same_values_so_it_is_not_hicache(hicache, radix):
    def divergences(doc: dict[str, Any]) -> dict[str, Any]:
        return {q["id"]: (q["status"], q["cached_tokens"], q["max_ulp"],
                          (q.get("first_divergence") or {}).get("position"))
                for q in requests(doc)}

    assert radix.doc["verdict"] == "fail"
    assert divergences(radix.doc) == divergences(hicache["branching"].doc)
