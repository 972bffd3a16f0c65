"""The GPU findings driver's plans and launches (scripts/gpu_sglang/matrix_plans.py and
run_matrix.py), read without a GPU: the two-GPU plans of issue 37 (TP 2; two DP workers behind
the router), the numerics switch a TP 1 golden replayed at TP 2 needs, and NVLink multicast kept
off in every server the driver starts. The driver itself runs on a GPU (docs/gpu.md)."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from types import ModuleType

import pytest

from replay.judge.numerics import NUMERICS_FIELDS, compare_numerics
from replay.run.replayer import ReplayOptions
from replay.server.launch import server_env
from replay.server.profile import load_profile, render
from replay.server.topology import TopologyProfile, is_topology, load_topology
from replay.server.topology_workers import worker_launch
from tests.support import paths

HERE = paths.REPO / "scripts" / "gpu_sglang"
MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
             "NVSHMEM_DISABLE_NVLS": "1"}  # /work/.library/device/KINDS.md, nvidia-h200-x2


def _load(name: str) -> ModuleType:
    before = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = before


plans = _load("matrix_plans")
run_matrix = _load("run_matrix")
TP2 = plans.PLANS["h200x2-tp2"]
DP = plans.PLANS["h200x2-dp"]


def servers_of(plan) -> dict[str, object]:
    return {s.role: s for s in plan.servers}


# --- TP 2 -------------------------------------------------------------------------------------

def test_the_tp2_plan_records_each_golden_on_a_tp1_and_a_tp2_reference():
    on = {g.name: (g.on, g.scenario, g.reference) for g in TP2.goldens}
    assert on == {
        "prompt-tp1": ("reference-tp1", "cpu-prompt-reuse", "cache-off"),
        "branching-tp1": ("reference-tp1", "hicache-branching", "cache-off"),
        "prompt-tp2": ("reference-tp2", "cpu-prompt-reuse", "cache-off"),
        "branching-tp2": ("reference-tp2", "hicache-branching", "cache-off"),
        "branching-cached-tp2": ("control", "hicache-branching", "cached"),
    }
    assert servers_of(TP2)["reference-tp1"].profile == servers_of(TP2)["reference-tp2"].profile \
        == "sglang-reference"


def test_every_tp2_server_but_the_tp1_reference_runs_at_tp_size_2():
    sizes = {s.role: [a for a in s.args if a.startswith("--tp-size")] for s in TP2.servers}
    assert sizes.pop("reference-tp1") == ["--tp-size=1"]
    assert set(sizes) == {"reference-tp2", "control", "seed", "kernel-io", "write-back",
                          "layer-first", "file"}
    assert all(v == ["--tp-size=2"] for v in sizes.values())
    assert servers_of(TP2)["control"].profile == "sglang-radix" and TP2.control == "control"
    assert TP2.gpus == 2


def test_every_tp2_golden_is_replayed_on_every_hicache_profile_with_the_tp2_control():
    replays = TP2.replays()
    names = [g.name for g in TP2.goldens]
    assert [(r, g) for r, g, twin in replays if twin] == [(r, g) for r in TP2.tested for g in names]
    assert [(r, g) for r, g, twin in replays if not twin] == (
        [("control", g) for g in names]
        + [("reference-tp2", "prompt-tp1"), ("reference-tp2", "branching-tp1")])


def test_tp_size_is_a_numerics_field_so_a_tp1_golden_differs_from_a_tp2_server():
    assert "tp_size" in NUMERICS_FIELDS
    assert compare_numerics({"tp_size": 1}, {"tp_size": 2}).differing == ("tp_size",)


@pytest.mark.parametrize("role", ["seed", "file", "control", "reference-tp2"])
def test_a_tp1_golden_is_replayed_allowing_the_numerics_mismatch(role):
    extra, flags = plans.replay_settings(TP2, role, "branching-tp1")
    assert ReplayOptions(**extra).allow_numerics_mismatch
    assert "--allow-numerics-mismatch" in flags


@pytest.mark.parametrize("golden", ["prompt-tp2", "branching-tp2", "branching-cached-tp2"])
def test_a_tp2_golden_is_judged_at_equal_numerics(golden):
    extra, flags = plans.replay_settings(TP2, "seed", golden)
    assert not ReplayOptions(**extra).allow_numerics_mismatch
    assert "--allow-numerics-mismatch" not in flags


def test_the_prompt_goldens_require_the_host_tier_on_hicache_and_the_storage_tier_on_file():
    assert plans.replay_settings(TP2, "seed", "prompt-tp2")[0] == {
        "schedule": "interleave", "repeat": 2, "require_tier": "host"}
    assert plans.replay_settings(TP2, "file", "prompt-tp2")[0]["require_tier"] == "storage"
    for role in ("control", "reference-tp2"):  # no tier to require there
        assert "require_tier" not in plans.replay_settings(TP2, role, "prompt-tp1")[0]


# --- DP ---------------------------------------------------------------------------------------

def test_the_dp_plan_replays_through_both_gpu_topologies_with_the_control():
    dp = servers_of(DP)
    assert (dp["dp"].profile, dp["dp-shared"].profile) == (
        "router-cache-aware-gpu", "router-cache-aware-gpu-shared-storage")
    assert all(is_topology(dp[r].profile) for r in DP.tested) and DP.tested == ("dp", "dp-shared")
    assert {(r, twin) for r, _, twin in DP.replays()} == {
        ("dp", True), ("dp-shared", True), ("control", False)}
    assert DP.gpus == 2


def test_the_dp_topologies_put_worker_i_on_gpu_i():
    for role in DP.tested:
        t = load_topology(servers_of(DP)[role].profile)
        envs = [worker_launch(t.worker_args, t.worker_env, i, None)[1] for i in range(t.workers)]
        assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1"]
        assert t.policy == "cache_aware"


def test_the_embedded_rehearsal_has_the_dp_plans_shape():
    rehearsal = plans.PLANS["embedded-dp"]
    assert rehearsal.tested == DP.tested
    assert all(is_topology(s.profile) for s in rehearsal.servers if s.role in rehearsal.tested)


# --- launches: NVLink multicast off everywhere ---------------------------------------------

@pytest.fixture
def launches(monkeypatch) -> list[tuple[object, dict]]:
    """What the driver would launch (a profile or a topology, and the launch's arguments)."""
    calls: list[tuple[object, dict]] = []

    def fake(what, **kw):
        calls.append((what, kw))
        return contextlib.nullcontext("http://127.0.0.1:1")

    monkeypatch.setattr(run_matrix, "launched", fake)
    monkeypatch.setattr(run_matrix, "launched_topology", fake)
    return calls


@pytest.mark.parametrize("plan", ["h200x2-tp2", "h200x2-dp", "h200", "embedded-dp"])
def test_every_server_the_driver_starts_gets_nvlink_multicast_off(plan, launches, tmp_path):
    for s in plans.PLANS[plan].servers:
        run_matrix.launch_of(s, "/m", "triton", tmp_path)
    assert len(launches) == len(plans.PLANS[plan].servers)
    assert all(kw["extra_env"] == MULTICAST for _, kw in launches)
    assert all(kw["attention_backend"] == "triton" for _, kw in launches)
    limits = [what.worker_startup_timeout if isinstance(what, TopologyProfile)
              else what.startup_timeout for what, _ in launches]
    assert limits == [run_matrix.START_TIMEOUT] * len(launches)


def test_a_topology_of_the_driver_logs_in_its_own_folder_its_workers_get_the_plans_args(
        launches, tmp_path):
    run_matrix.launch_of(servers_of(DP)["dp"], "/m", None, tmp_path, "-retry")
    (topology, kw), = launches
    assert topology.name == "router-cache-aware-gpu" and kw["log_dir"] == tmp_path / "dp-retry"
    assert kw["extra_args"] == ("--cuda-graph-max-bs=16",)


def test_the_drivers_variables_reach_the_server_over_the_profile_and_the_callers_env():
    rendered = render(load_profile("sglang-hicache-seed"), model="/m", port=1,
                      log_dir=paths.REPO, attention_backend="triton", extra_env=MULTICAST)
    env = server_env(rendered, environ={"NCCL_NVLS_ENABLE": "1", "PATH": "/bin"})
    assert {k: env[k] for k in MULTICAST} == MULTICAST and env["PATH"] == "/bin"


def test_the_driver_keeps_the_device_kinds_variables():
    assert plans.MULTICAST_OFF == MULTICAST


def test_no_plan_starts_a_server_that_would_turn_multicast_on(monkeypatch):
    monkeypatch.setattr(run_matrix, "gpu_count", lambda: 8)
    for name, plan in plans.PLANS.items():
        assert run_matrix.plan_problems(plan, plan.servers) == [], name


@pytest.mark.parametrize("flag", ["--enable-symm-mem", "--enable-nccl-nvls",
                                  "--enable-torch-symm-mem"])
def test_a_server_with_a_multicast_flag_is_refused_before_anything_starts(flag, monkeypatch):
    monkeypatch.setattr(run_matrix, "gpu_count", lambda: 2)
    bad = plans.Server("seed", "sglang-hicache-seed", ("--tp-size=2", flag))
    worker = plans.Server("dp", "router-cache-aware-gpu", (f"{flag}=true",))
    problems = run_matrix.plan_problems(TP2, (bad, worker))
    assert len(problems) == 2 and all("NVLink multicast" in p for p in problems)


def test_a_two_gpu_plan_on_one_gpu_is_refused_naming_the_kind(monkeypatch):
    monkeypatch.setattr(run_matrix, "gpu_count", lambda: 1)
    (problem,) = run_matrix.plan_problems(TP2, TP2.servers)
    assert "needs 2 GPU(s), nvidia-smi lists 1" in problem and "nvidia-h200-x2" in problem


# --- results ----------------------------------------------------------------------------------

def test_a_routed_replays_row_says_who_served_what_and_which_numerics_differed():
    doc = {"verdict": "pass", "summary": {"requests": 27, "repeats": 1, "requests_failed": 0},
           "numerics": {"differing": ["tp_size"]},
           "routing": {"hit_rate": 1.0, "routing_misses": 0, "failing_workers": [],
                       "per_worker": [{"index": 0, "requests": 18, "failed": 0,
                                       "expected_hits": 12, "hits_met": 12, "cached_tokens": 9},
                                      {"index": 1, "requests": 9, "failed": 0,
                                       "expected_hits": 6, "hits_met": 6, "cached_tokens": 3}]}}
    row = run_matrix.row_of("dp", "branching", doc, 1.0, "golden replay ...")
    assert row["numerics_differing"] == ["tp_size"] and row["failing_workers"] == []
    table = run_matrix.table([row])
    assert "| tp_size |" in table
    assert "w0 18 (0 failed, hits 12/12); w1 9 (0 failed, hits 6/6); hit rate 1.0" in table


def test_a_single_servers_row_has_no_per_worker_cell():
    doc = {"verdict": "pass", "summary": {"requests": 12, "repeats": 1, "requests_failed": 0}}
    row = run_matrix.row_of("seed", "quick", doc, 1.0, "golden replay ...")
    assert "per_worker" not in row and run_matrix.per_worker_cell(row) == "-"
