"""Behind sglang-router's MiniLB (`--mini-lb --pd-disaggregation`), the server facts are the
prefill worker's: MiniLB answers /get_server_info with its workers' own answers."""

from replay.server.apis.sglang import ROUTER_KEY, mini_lb_facts

PREFILL = {"page_size": 128, "disable_radix_cache": False, "disaggregation_mode": "prefill"}
DECODE = {"page_size": 128, "disable_radix_cache": True, "disaggregation_mode": "decode"}


def test_the_facts_are_the_prefill_workers_where_prefix_reuse_happens():
    facts = mini_lb_facts({"internal_states": [{}], "prefill": [PREFILL], "decode": [DECODE]})
    assert facts["disaggregation_mode"] == "prefill" and facts["disable_radix_cache"] is False
    assert facts[ROUTER_KEY]["worker_server_info"] == [PREFILL, DECODE]
