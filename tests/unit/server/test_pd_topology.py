"""Prefill/decode-disaggregated topologies: the profile, the router's PD flags, and which pair
served each request, read from the router's own debug log (tests/data/router/pd-*: lines a real
sglang-router 0.3.2 wrote in PD mode over SGLang 0.5.23's CPU prefill and decode servers)."""

import pytest

from replay.server.pd_topology import PDTopologyProfile, pd_router_args, read_pd_attribution
from replay.server.topology import parse_topology
from replay.utils.errors import UsageError
from tests.support import paths

LOG = paths.DATA / "router" / "pd-round-robin-debug.log"
WORKERS = {"http://127.0.0.1:31100": 0, "http://127.0.0.1:31200": 1}
PD = "[topology]\nkind = 'pd'\nprefill_profile = 'p'\ndecode_profile = 'd'\n"


def test_a_pd_topology_names_a_launch_profile_for_each_half():
    topology = parse_topology(PD + "prefill_workers = 2\n", name="t")
    assert isinstance(topology, PDTopologyProfile) and topology.kind == "pd"
    assert (topology.prefill_workers, topology.decode_workers, topology.workers) == (2, 1, 3)
    assert topology.shape == "2 x p + 1 x d"


@pytest.mark.parametrize("body, problem", [
    ("[topology]\nkind = 'pd'\nprefill_profile = 'p'\n", "missing key decode_profile"),
    (PD + "decode_workers = 0\n", "decode_workers must be 1..8"),
    (PD + "policy = 'nearest'\n", "policy must be one of"),
    (PD + "worker_profile = 'x'\n", "unknown key(s) worker_profile"),
    ("[topology]\nkind = 'mesh'\nworker_profile = 'x'\n", "kind must be router or pd"),
])
def test_a_bad_pd_topology_is_refused_naming_the_problem(body, problem):
    with pytest.raises(UsageError, match="topology 't'") as info:
        parse_topology(body, name="t")
    assert problem in str(info.value)


def test_the_router_is_told_every_prefill_url_with_its_bootstrap_port_and_every_decode_url():
    topology = parse_topology(PD, name="t")
    assert pd_router_args(topology, [("http://p0", 9001), ("http://p1", 9002)], ["http://d0"]) == [
        "--pd-disaggregation", "--prefill", "http://p0", "9001", "--prefill", "http://p1", "9002",
        "--decode", "http://d0", "--policy", "round_robin"]


def test_the_router_log_says_which_prefill_and_decode_worker_served_each_request():
    assert read_pd_attribution(LOG, WORKERS) == {
        "g0/b0/t0": [(0, 1)], "g0/b1/t0": [(0, 1)], "g0/b2/t0": [(0, 1)]}


def line(rid: str, text: str) -> str:
    return f'2026 DEBUG http_request{{method=POST uri=/generate request_id="{rid}"}}: {text}\n'


def sent(rid: str, prefill: str, decode: str) -> str:
    return line(rid, f"smg::observability::events: Sending concurrent requests "
                     f"prefill_url={prefill} decode_url={decode}")


def answered(rid: str, status: int = 200) -> str:
    return (f'2026 INFO http_request{{method=POST uri=/generate request_id="{rid}" '
            f"status_code={status} latency=1}}: smg::response: finished processing request\n")


def test_a_retried_request_is_attributed_to_the_attempt_that_was_answered(tmp_path):
    workers = {"http://p0": 0, "http://p1": 1, "http://d0": 2}
    log = tmp_path / "router.log"
    log.write_text(sent("g0/b0/t1", "http://p0", "http://d0")
                   + line("g0/b0/t1", "smg::routers::http::pd_router: PD retry attempt 2")
                   + sent("g0/b0/t1", "http://p1", "http://d0") + answered("g0/b0/t1"))
    assert read_pd_attribution(log, workers) == {"g0/b0/t1": [(1, 2)]}


def test_an_id_answered_twice_is_attributed_once_per_answer_in_order(tmp_path):
    workers = {"http://p0": 0, "http://p1": 1, "http://d0": 2}
    log = tmp_path / "router.log"
    log.write_text(sent("g0/b0/t0", "http://p0", "http://d0") + answered("g0/b0/t0")
                   + sent("g0/b0/t0", "http://p1", "http://d0") + answered("g0/b0/t0"))
    assert read_pd_attribution(log, workers) == {"g0/b0/t0": [(0, 2), (1, 2)]}


def test_a_send_to_a_url_outside_the_topology_is_not_attributed(tmp_path):
    log = tmp_path / "router.log"
    log.write_text(sent("g0/b0/t0", "http://elsewhere", "http://127.0.0.1:31200")
                   + answered("g0/b0/t0"))
    assert read_pd_attribution(log, WORKERS) == {}


def test_a_missing_router_log_attributes_nothing(tmp_path):
    assert read_pd_attribution(tmp_path / "none.log", WORKERS) == {}


def test_a_mini_lb_topology_is_one_pair_picked_at_random():
    topology = parse_topology(PD + "router = 'mini-lb'\n", name="t")
    assert (topology.router, topology.policy) == ("mini-lb", "random")
    assert pd_router_args(topology, [("http://p0", 9001)], ["http://d0"]) == [
        "--mini-lb", "--pd-disaggregation", "--prefill", "http://p0", "9001", "--decode",
        "http://d0"]


@pytest.mark.parametrize("extra, problem", [
    ("prefill_workers = 2\n", "takes one prefill and one decode worker"),
    ("policy = 'cache_aware'\n", "picks at random"),
])
def test_a_mini_lb_topology_refuses_what_it_cannot_do(extra, problem):
    with pytest.raises(UsageError, match=problem):
        parse_topology(PD + "router = 'mini-lb'\n" + extra, name="t")
