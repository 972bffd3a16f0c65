"""What each worker of a topology gets of its own (replay/server/topology_workers.py): `{worker}`
and `{shared_storage}` filled into `worker_args` / `worker_env`, checked when the file is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.server.topology_workers import parse_worker_templates, worker_launch
from replay.utils.errors import UsageError

SHARED = Path("/logs/t-shared-storage-x")


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
