"""End to end on SGLang 0.5.23's REAL server on a CPU: its HTTP server, Scheduler, ModelRunner,
radix cache and HiCache (host pool, write-through, eviction to host, load back), started by the
sglang-cpu-* launch profiles (`python -m replay.sglang_cpu`, docs/sglang-cpu.md) with a tiny
random-weight Llama (bf16, seed 0). What is asserted is what was found (docs/findings.md, "SGLang's
real server on a CPU"):

- prompt-only reuse (cpu-prompt-reuse: 8 groups x 4 branches, a 576-token prefix each, interleaved
  so that 8 prefixes outgrow the 4,096-token device pool) replays bit for bit, with hits served
  from the host tier, in both repeats; the flush between repeats really empties the cache;
- every CPU patch logs itself in the server's log.

Multi-turn reuse (cpu-branching), where follow-ups diverge on this server and on its radix-only
twin alike, is test_control.py's: its `--control auto` run replays that golden on these same two
profiles. The server is shared by the whole module; the goldens are recorded once per session
(conftest.py).
Needs `bash scripts/install_sglang_cpu.sh` (scripts/test.sh runs it); skipped otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest

from replay.server.launch import launched
from replay.server.profile import load_profile
from replay.sglang_cpu.locate import install_hint
from replay.sglang_cpu.patches import LOG_PREFIX
from tests.support.sglang_cpu import STAMP, replay, requests

pytestmark = pytest.mark.skipif(not STAMP.is_file(), reason=install_hint())


@pytest.fixture(scope="module")
def hicache(cpu_work, cpu_model, cpu_goldens) -> dict[str, Any]:
    log = cpu_work / "logs" / "hicache.log"
    with launched(load_profile("sglang-cpu-hicache"), model=cpu_model, log_path=log) as url:
        prompt = replay(url, cpu_goldens["cpu-prompt-reuse"], cpu_work / "hicache-prompt.json",
                        "--repeat", "2", "--require-tier", "host")
    return {"prompt": prompt, "log": log.read_text()}


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

