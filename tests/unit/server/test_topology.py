"""Topology profiles (workers behind SGLang's router) and who served what, read from the
router's own debug log (tests/data/router/: lines a real sglang-router 0.3.2 wrote while
round-robin routing the committed hicache-branching golden over two embedded workers)."""

import pytest

from replay.server.topology import (
    RoutedURL, Topology, Worker, builtin_topology_names, is_topology, load_topology,
    parse_topology, read_attribution,
)
from replay.server.profile import load_profile
from replay.utils.errors import UsageError
from tests.support import paths

LOG = paths.DATA / "router" / "round-robin-debug.log"
WORKERS = {"http://127.0.0.1:35397": 0, "http://127.0.0.1:41117": 1}


def test_the_router_log_says_which_worker_got_each_request():
    sent = read_attribution(LOG, WORKERS)
    assert sent["g0/b0/t0"] == [1] and sent["g2/b2/t0"] == [0] and sent["g0/b2/t0"] == [0]


def test_requests_the_tool_did_not_send_are_not_attributed():
    assert all(key.startswith("g") for key in read_attribution(LOG, WORKERS))


def test_an_id_sent_twice_is_attributed_once_per_send_in_order(tmp_path):
    log = tmp_path / "router.log"
    line = 'x request_id="g0/b0/t1"}: smg::observability::events: Sending request url=URL\n'
    log.write_text(line.replace("URL", "http://127.0.0.1:35397")
                   + line.replace("URL", "http://127.0.0.1:41117"))
    assert read_attribution(log, WORKERS) == {"g0/b0/t1": [0, 1]}


def test_a_missing_router_log_attributes_nothing(tmp_path):
    assert read_attribution(tmp_path / "none.log", WORKERS) == {}


def test_builtin_topologies_load_and_name_a_real_worker_profile():
    names = builtin_topology_names()
    assert {"router-cache-aware", "router-round-robin",
            "router-round-robin-shared-storage", "pd-cpu", "pd-cpu-hicache"} <= set(names)
    for name in names:
        topology = load_topology(name)
        assert is_topology(name) and topology.workers >= 2
        if topology.kind == "router":
            assert topology.worker_profile.startswith("embedded-")
        else:
            assert load_profile(topology.prefill_profile).name.startswith("pd-cpu-prefill")
            assert load_profile(topology.decode_profile).name == "pd-cpu-decode"


def test_a_plain_server_profile_is_not_a_topology():
    assert not is_topology("embedded-hicache")


@pytest.mark.parametrize("body, problem", [
    ("[topology]\nworkers = 2\n", "missing key worker_profile"),
    ("[topology]\nworker_profile = 'x'\npolicy = 'nearest'\n", "policy must be one of"),
    ("[topology]\nworker_profile = 'x'\nworkers = 0\n", "workers must be 1..16"),
    ("[topology]\nworker_profile = 'x'\nfault_worker = 5\n", "fault_worker must be 0..1"),
    ("[topology]\nworker_profile = 'x'\nspeed = 3\n", "unknown key(s) speed"),
    ("workers = 2\n", "no [topology] table"),
])
def test_a_bad_topology_profile_is_refused_naming_the_problem(body, problem):
    with pytest.raises(UsageError, match="topology 't'") as info:
        parse_topology(body, name="t")
    assert problem in str(info.value)


def test_the_fault_goes_to_the_last_worker_unless_named():
    assert parse_topology("[topology]\nworker_profile = 'x'\nworkers = 3\n", name="t").fault_worker == 2


def test_a_routed_url_is_the_router_url_and_carries_its_topology(tmp_path):
    topology = Topology(parse_topology("[topology]\nworker_profile = 'x'\n", name="t"),
                        "http://127.0.0.1:1", tmp_path / "r.log", [Worker(0, "http://a", None)])
    url = RoutedURL(topology)
    assert url == "http://127.0.0.1:1" and url.topology is topology
