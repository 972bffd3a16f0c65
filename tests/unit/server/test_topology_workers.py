"""What each worker of a topology gets of its own (replay/server/topology_workers.py): `{worker}`
and `{shared_storage}` filled into `worker_args` / `worker_env`, checked when the file is read;
and who served what, read from the router's own debug log (tests/data/router/: lines a real
sglang-router 0.3.2 wrote while round-robin routing the committed hicache-branching golden over
two embedded workers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.server.topology_workers import parse_worker_templates, read_attribution, worker_launch
from replay.utils.errors import UsageError
from tests.support import paths

SHARED = Path("/logs/t-shared-storage-x")
LOG = paths.DATA / "router" / "round-robin-debug.log"
WORKERS = {"http://127.0.0.1:35397": 0, "http://127.0.0.1:41117": 1}


def test_each_worker_gets_its_own_index_in_its_args_and_env():
    args, env = ("--base-gpu-id", "{worker}"), {"CUDA_VISIBLE_DEVICES": "{worker}"}
    assert worker_launch(args, env, 0, None) == (["--base-gpu-id", "0"], {"CUDA_VISIBLE_DEVICES": "0"})
    assert worker_launch(args, env, 1, None) == (["--base-gpu-id", "1"], {"CUDA_VISIBLE_DEVICES": "1"})


def test_a_shared_directory_placed_in_the_env_is_not_also_passed_as_storage_dir():
    env = {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "{shared_storage}"}
    assert worker_launch((), env, 1, SHARED) == (
        [], {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": str(SHARED)})


def test_a_shared_directory_placed_nowhere_goes_as_storage_dir_first():
    assert worker_launch(("--x", "{worker}"), {}, 0, SHARED) == (
        ["--storage-dir", str(SHARED), "--x", "0"], {})


def test_without_worker_keys_or_shared_storage_a_worker_gets_nothing_of_its_own():
    assert worker_launch((), {}, 3, None) == ([], {})


def test_literal_braces_are_written_doubled_as_in_launch_profiles():
    assert worker_launch(('{{"gpu": {worker}}}',), {}, 1, None)[0] == ['{"gpu": 1}']


@pytest.mark.parametrize("table, problem", [
    ({"worker_env": {"CUDA_VISIBLE_DEVICES": "{gpu}"}}, "unknown placeholder(s) {gpu}"),
    ({"worker_args": ["--base-gpu-id", "{}"]}, "unknown placeholder(s) {}"),
    ({"worker_args": ["--x", "{worker"]}, "bad placeholder syntax"),
    ({"worker_env": {"D": "{shared_storage}"}}, "set shared_storage = true"),
    ({"worker_env": {"CUDA_VISIBLE_DEVICES": 0}}, "worker_env must be a table of strings"),
    ({"worker_args": "--base-gpu-id {worker}"}, "worker_args must be a list of strings"),
])
def test_a_bad_worker_template_is_refused_naming_the_problem(table, problem):
    with pytest.raises(UsageError, match="topology 't'") as info:
        parse_worker_templates(table, name="t", shared_storage=False)
    assert problem in str(info.value)


def test_the_shared_directory_may_be_placed_when_the_topology_shares_one():
    table = {"worker_env": {"D": "{shared_storage}"}, "worker_args": ["--g", "{worker}"]}
    assert parse_worker_templates(table, name="t", shared_storage=True) == (
        ("--g", "{worker}"), {"D": "{shared_storage}"})


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
