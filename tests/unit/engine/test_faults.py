"""Each injected fault breaks exactly the cache path it names: cold requests stay exact, the
request served through that path does not (or, for overreport-cached, lies about its hit)."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace

import pytest

from replay.engine.engine import LLMEngine
from replay.engine.faults import FAULTS, Faults
from replay.engine.server import start_server
from replay.engine.sequence import Sequence
from tests.unit.engine.test_exactness import (HICACHE, HIT_B, NEW_A, NEW_B, REFERENCE, Out, cold, draw,
                                         generate_all, model, prompts, run_conversation)

# The cache shape under which each fault's path is taken by request B.
FAULT_OPTIONS = {
    "host-bf16": HICACHE,  # B's checkpoint at 24 comes back from host
    "late-ssm-checkpoint": HICACHE,  # the checkpoint at 24 was recorded in A's decode
    "stale-host-page": HICACHE,
    "write-back-early-evict": replace(HICACHE, hicache_write_policy="write_back"),
    "page-first-head-transpose": HICACHE,
    "conv-state-dropped": HICACHE,
    # B's hit comes back from L3 (test_exactness.test_storage_tier_hits_are_bit_identical's
    # shape); the storage directory is the engine's own temporary one
    "storage-read-unfilled": replace(HICACHE, hicache_ratio=0.6, hicache_storage_backend="file"),
}


@pytest.mark.parametrize("fault", sorted(FAULT_OPTIONS))
def test_fault_corrupts_the_cache_hit_but_not_cold_requests(fault):
    seqs = run_conversation(replace(FAULT_OPTIONS[fault], fault=fault))
    assert Out.of(seqs["A"]) == cold()["A"] and Out.of(seqs["C"]) == cold()["C"]
    assert seqs["B"].reused == HIT_B
    assert Out.of(seqs["B"]) != cold()["B"], f"{fault} left the cache hit exact"


def test_every_fault_is_exercised_here():
    others = {"overreport-cached", "prompt-logprobs-stale-buffer", "split-k-by-extend",
              "host-load-race", "cache-key-drops-extra-key", "largest-group-hit",
              "checkpoint-on-shorter-key"}
    assert set(FAULT_OPTIONS) | others == set(FAULTS)


def test_split_k_fault_changes_only_a_request_whose_hit_shortened_its_prefill():
    """The faulty kernel is a property of the library, on the reference as on the cached server:
    cold requests agree; B, prefilling 8 tokens after its hit, does not."""
    fault = "split-k-by-extend"
    engine = LLMEngine(replace(REFERENCE, fault=fault), model())
    try:
        p = prompts()
        cold_faulty = {name: Out.of(engine.generate(p[name], n, 3))
                       for name, n in (("A", NEW_A), ("C", 1), ("B", NEW_B))}
    finally:
        engine.close()
    seqs = run_conversation(replace(HICACHE, fault=fault))
    assert Out.of(seqs["A"]) == cold_faulty["A"] and Out.of(seqs["C"]) == cold_faulty["C"]
    assert seqs["B"].reused == HIT_B and Out.of(seqs["B"]) != cold_faulty["B"]


def test_late_checkpoint_needs_overlap_scheduling():
    assert not Faults("late-ssm-checkpoint").late_checkpoint(overlap=False)
    seqs = run_conversation(replace(HICACHE, fault="late-ssm-checkpoint",
                                    disable_overlap_schedule=True))
    assert Out.of(seqs["B"]) == cold()["B"]


def test_page_first_fault_leaves_layer_first_exact():
    seqs = run_conversation(replace(HICACHE, fault="page-first-head-transpose",
                                    hicache_mem_layout="layer_first"))
    assert seqs["B"].cached.host > 0 and Out.of(seqs["B"]) == cold()["B"]


def _generate(url: str, ids: list[int], n: int) -> dict:
    body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": n,
                                                  "ignore_eos": True},
            "return_logprob": True, "top_logprobs_num": 3}
    request = urllib.request.Request(url + "/generate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


def test_overreport_cached_claims_the_whole_prompt_but_computes_exactly():
    p = prompts()
    with start_server(replace(HICACHE, fault="overreport-cached"), model()) as server:
        a = _generate(server.url, p["A"], 6)
        b = _generate(server.url, p["B"], 6)
    assert a["meta_info"]["cached_tokens"] == 0  # a cold request reports honestly
    assert b["meta_info"]["cached_tokens"] == len(p["B"])  # more than could ever be reused
    assert sum(v for v in b["meta_info"]["cached_tokens_details"].values()) == HIT_B
    assert [lp for lp, _, _ in b["meta_info"]["output_token_logprobs"]] == list(cold()["B"].logprobs)


def _prompt_logprobs(engine: LLMEngine, ids: list[int]) -> tuple[list[float], int]:
    seq = engine.generate(ids, 0, logprob_start_len=0)
    assert seq.error is None, seq.error
    return seq.input_logprobs, seq.reused


def test_stale_prompt_logprob_buffer_serves_reused_positions_from_the_previous_request():
    p = prompts()
    clean = LLMEngine(REFERENCE, model())
    try:
        cold_b, _ = _prompt_logprobs(clean, p["B"])
    finally:
        clean.close()
    engine = LLMEngine(replace(HICACHE, fault="prompt-logprobs-stale-buffer"), model())
    try:
        engine.generate(p["A"], NEW_A)  # caches A's prompt and output
        first, _ = _prompt_logprobs(engine, p["C"])  # a cold request: fills the buffer honestly
        b, cached = _prompt_logprobs(engine, p["B"])  # reuses A's pages despite logprob_start_len 0
    finally:
        engine.close()
    assert cached == HIT_B  # SGLang would have reused nothing
    assert b[cached:] == cold_b[cached:]  # rows after the reused positions are computed, exact
    left_behind = (first + [0.0] * cached)[:cached]  # C's rows, then what C never wrote
    assert b[:cached] == left_behind != cold_b[:cached]



def _host_hit_beside(other_at_once: bool) -> dict[str, Sequence]:
    """A; then E, long and cold, evicts A's deepest pages to host; then X (cold, 20 decode steps:
    still running whenever B arrives) and B
    (hits A, partly from host): submitted together, or X first and B after it finished."""
    p = prompts()
    engine = LLMEngine(replace(HICACHE, fault="host-load-race", max_total_tokens=64), model())
    try:
        seqs = generate_all(engine, {"A": (p["A"], NEW_A)})
        seqs |= generate_all(engine, {"E": (draw(7, 40), NEW_A)})
        if other_at_once:
            return seqs | generate_all(engine, {"X": (draw(8, 3), 20), "B": (p["B"], NEW_B)})
        seqs |= generate_all(engine, {"X": (draw(8, 3), 20)})
        return seqs | generate_all(engine, {"B": (p["B"], NEW_B)})
    finally:
        engine.close()


def test_host_load_race_corrupts_a_host_hit_computed_beside_another_request():
    seqs = _host_hit_beside(other_at_once=True)
    assert seqs["B"].cached.host > 0 and seqs["B"].reused == HIT_B
    assert Out.of(seqs["A"]) == cold()["A"]
    assert Out.of(seqs["B"]) != cold()["B"]


def test_host_load_race_is_harmless_when_the_request_computes_alone():
    """At concurrency 1 the unwaited copy wins the race: the same host hit is exact."""
    seqs = _host_hit_beside(other_at_once=False)
    assert seqs["B"].cached.host > 0 and seqs["B"].reused == HIT_B
    assert Out.of(seqs["B"]) == cold()["B"]


def _follow_up_of_a(fault: str | None) -> tuple[Sequence, Out]:
    """A (21 prompt tokens) decodes 10: 30 positions get KV, its full pages end at 28, its last
    checkpoint is at 24; B continues A's conversation, so its pages match A's up to 28. Returns
    B and B's cold run."""
    p = prompts()
    options = replace(HICACHE, fault=fault, enable_hierarchical_cache=False, max_total_tokens=1024)
    engine = LLMEngine(options, model())
    try:
        a = engine.generate(p["A"], 10, 3)
        b_ids = p["A"] + list(a.output_ids) + draw(9, 3)
        b = engine.generate(b_ids, 4, 3)
    finally:
        engine.close()
    reference = LLMEngine(REFERENCE, model())
    try:
        return b, Out.of(reference.generate(b_ids, 4, 3))
    finally:
        reference.close()


def test_without_a_fault_the_follow_up_resumes_at_the_last_checkpoint():
    b, cold_b = _follow_up_of_a(None)
    assert b.reused == 24 and Out.of(b) == cold_b


def test_largest_group_hit_resumes_past_the_checkpoint_with_no_state():
    b, cold_b = _follow_up_of_a("largest-group-hit")
    assert b.reused == 28  # the attention group's hit: every matched page
    assert Out.of(b) != cold_b


def test_checkpoint_on_shorter_key_gives_the_last_page_a_state_from_past_it():
    b, cold_b = _follow_up_of_a("checkpoint-on-shorter-key")
    assert b.reused == 28  # A's final state (after 30 positions) stamped on the node ending at 28
    assert Out.of(b) != cold_b


def _same_prompt_twice(fault: str | None) -> tuple[Sequence, Sequence]:
    """One prompt sent with cache key "tenant-a", then with "tenant-b", then "tenant-a" again."""
    ids = prompts()["A"]
    engine = LLMEngine(replace(HICACHE, fault=fault, max_total_tokens=1024), model())
    try:
        engine.generate(ids, 1, 3, extra_key="tenant-a")
        other = engine.generate(ids, 1, 3, extra_key="tenant-b")
        same = engine.generate(ids, 1, 3, extra_key="tenant-a")
    finally:
        engine.close()
    return other, same


def test_requests_with_different_extra_keys_share_no_cached_page():
    other, same = _same_prompt_twice(None)
    assert other.reused == 0 and same.reused == 16


def test_cache_key_drops_extra_key_shares_pages_across_keys():
    other, _ = _same_prompt_twice("cache-key-drops-extra-key")
    assert other.reused == 16
