"""Topology profiles (workers behind SGLang's router) and who served what, read from the
router's own debug log (tests/data/router/: lines a real sglang-router 0.3.2 wrote while
round-robin routing the committed hicache-branching golden over two embedded workers)."""

from pathlib import Path

import pytest

from replay.server.topology import (
    RoutedURL, Topology, Worker, builtin_topology_names, is_topology, load_topology,
    parse_topology,
)
from replay.server.profile import load_profile
from replay.server.topology_workers import worker_launch
from replay.utils.errors import UsageError

GPU = ("-gpu", "-gpu-shared-storage")  # the built-in topologies of real SGLang GPU workers


def test_builtin_topologies_load_and_name_a_real_worker_profile():
    names = builtin_topology_names()
    assert {"router-cache-aware", "router-round-robin",
            "router-round-robin-shared-storage", "pd-cpu", "pd-cpu-hicache"} <= set(names)
    for name in names:
        topology = load_topology(name)
        assert is_topology(name) and topology.workers >= 2
        if topology.kind == "router" and name.endswith(GPU):
            assert load_profile(topology.worker_profile).name.startswith("sglang-hicache-")
        elif topology.kind == "router":
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


def test_the_gpu_topologies_put_worker_i_on_gpu_i():
    for name in ("router-cache-aware-gpu", "router-cache-aware-gpu-shared-storage"):
        t = load_topology(name)
        assert t.policy == "cache_aware" and t.workers == 2
        assert [worker_launch(t.worker_args, t.worker_env, i, None if not t.shared_storage
                              else Path("/s"))[1]["CUDA_VISIBLE_DEVICES"] for i in (0, 1)] == ["0", "1"]


def test_the_gpu_shared_storage_topology_points_sglangs_file_backend_at_the_shared_directory():
    t = load_topology("router-cache-aware-gpu-shared-storage")
    args, env = worker_launch(t.worker_args, t.worker_env, 1, Path("/s/shared"))
    assert t.shared_storage and args == []  # SGLang has no --storage-dir
    assert env == {"CUDA_VISIBLE_DEVICES": "1", "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/s/shared"}
    assert "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR" in load_profile(t.worker_profile).env


@pytest.mark.parametrize("name", ["router-cache-aware", "router-round-robin",
                                  "router-cache-aware-shared-storage",
                                  "router-round-robin-shared-storage"])
def test_the_cpu_topologies_launch_their_workers_as_before(name):
    t = load_topology(name)
    assert t.worker_args == () and t.worker_env == {}
    shared = Path("/s") if t.shared_storage else None
    assert worker_launch(t.worker_args, t.worker_env, 1, shared) == (
        ["--storage-dir", "/s"] if shared else [], {})


def fake_launches(monkeypatch) -> list[tuple[str, dict]]:
    """The topology's launches, recorded instead of started (each yields a URL of its own)."""
    import contextlib

    from replay.server import topology as module

    calls: list[tuple[str, dict]] = []

    @contextlib.contextmanager
    def launched(profile, **kw):
        calls.append((profile.name, {**kw, "profile": profile}))
        yield f"http://127.0.0.1:{1000 + len(calls)}"

    monkeypatch.setattr(module, "launched", launched)
    monkeypatch.setattr(module, "router_python", lambda: "/router/python")
    monkeypatch.setattr(module, "wait_for_workers", lambda *a, **k: None)
    return calls


def test_each_gpu_worker_is_launched_on_its_gpu_with_the_callers_env_winning(tmp_path, monkeypatch):
    from replay.server.topology import launched_topology

    calls = fake_launches(monkeypatch)
    topology = load_topology("router-cache-aware-gpu-shared-storage")
    imposed = {"NCCL_NVLS_ENABLE": "0", "CUDA_VISIBLE_DEVICES": "0,1"}
    with launched_topology(topology, model="M", log_dir=tmp_path, extra_env=imposed,
                           attention_backend="triton", extra_args=["--x"]) as url:
        shared = Path(calls[0][1]["extra_env"]["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"])
        assert shared.is_dir() and shared.parent == tmp_path
        assert [w.url for w in url.topology.workers] == ["http://127.0.0.1:1001", "http://127.0.0.1:1002"]
    assert not shared.exists()  # removed with the topology
    workers, router = calls[:2], calls[2]
    assert [name for name, _ in workers] == ["sglang-hicache-file-storage"] * 2
    assert [kw["extra_env"] for _, kw in workers] == [
        {"CUDA_VISIBLE_DEVICES": "0,1", "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": str(shared),
         "NCCL_NVLS_ENABLE": "0"}] * 2  # the caller's variables win over worker_env
    assert all(kw["attention_backend"] == "triton" and kw["extra_args"] == ["--x"]
               for _, kw in workers)
    assert router[0].endswith("-router") and router[1]["extra_env"] == imposed
    assert [kw["profile"].startup_timeout for _, kw in workers] == [1200, 1200]  # the profile's


def test_worker_i_gets_gpu_i_when_the_caller_imposes_no_gpu(tmp_path, monkeypatch):
    from replay.server.topology import launched_topology

    calls = fake_launches(monkeypatch)
    with launched_topology(load_topology("router-cache-aware-gpu"), model="M", log_dir=tmp_path):
        pass
    assert [kw["extra_env"] for _, kw in calls[:2]] == [{"CUDA_VISIBLE_DEVICES": "0"},
                                                        {"CUDA_VISIBLE_DEVICES": "1"}]
    assert [kw["extra_args"] for _, kw in calls[:2]] == [[], []]


def test_an_attention_backend_the_workers_cannot_take_is_refused_before_anything_starts(
        tmp_path, monkeypatch):
    from replay.server.topology import launched_topology

    calls = fake_launches(monkeypatch)
    with pytest.raises(UsageError, match="takes no --attention-backend"), launched_topology(
            load_topology("router-cache-aware"), model=None, log_dir=tmp_path,
            attention_backend="triton"):
        pass
    with pytest.raises(UsageError, match="does not apply to a PD topology"):
        launched_topology(load_topology("pd-cpu"), model="M", log_dir=tmp_path,
                          attention_backend="triton")
    assert calls == []


def test_a_worker_start_limit_replaces_the_worker_profiles_own(tmp_path, monkeypatch):
    from dataclasses import replace

    from replay.server.topology import launched_topology

    calls = fake_launches(monkeypatch)
    topology = replace(load_topology("router-cache-aware-gpu"), worker_startup_timeout=240.0)
    with launched_topology(topology, model="M", log_dir=tmp_path):
        pass
    assert [c[1]["profile"].startup_timeout for c in calls[:2]] == [240.0, 240.0]
    assert load_profile("sglang-hicache-seed").startup_timeout == 1200
