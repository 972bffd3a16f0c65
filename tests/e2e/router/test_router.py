"""Replaying the committed hicache-branching golden through SGLang's REAL router (sglang-router
0.3.2 from PyPI) over two embedded HiCache workers: what each routing policy achieves, and a
faulty worker behind a healthy router caught and named (docs/topologies.md, docs/findings.md).

The findings asserted here are the ones measured: cache-aware routing meets every expected hit;
round-robin without a shared tier sends turns away from their prefix (misses the report explains,
not cache bugs); round-robin over one shared storage directory meets every hit, loaded from the
other worker's pages bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from replay.server.topology import router_python
from replay.utils.errors import UsageError
from tests.support import paths
from tests.support.console import flattened

GOLDEN = paths.GOLDENS / "hicache-branching.zarr"

try:
    router_python()
except UsageError as exc:
    pytest.skip(f"{exc}", allow_module_level=True)


def replay(tmp_path, topology: str, *extra: str) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "replay", str(GOLDEN), "--launch", topology,
         "--report", str(report), "--log-dir", str(tmp_path / "logs"), *extra],
        capture_output=True, text=True, timeout=600, cwd=paths.REPO)
    return proc.returncode, json.loads(report.read_text()), proc.stdout + proc.stderr


def test_cache_aware_routing_meets_every_expected_hit_bit_for_bit(tmp_path):
    code, report, _ = replay(tmp_path, "router-cache-aware")
    routing = report["routing"]
    assert code == 0 and report["verdict"] == "pass"
    assert routing["policy"] == "cache_aware" and routing["attributed"] == 27
    assert routing["hit_rate"] == 1.0 and routing["routing_misses"] == 0


def test_round_robin_without_a_shared_tier_shows_the_misses_the_routing_causes(tmp_path):
    code, report, out = replay(tmp_path, "router-round-robin")
    routing = report["routing"]
    assert code == 0 and report["verdict"] == "pass"
    assert routing["routing_misses"] > 0 and routing["hit_rate"] < 1.0
    explained = [r for r in report["requests"] if r["routing_note"]]
    assert len(explained) == routing["routing_misses"]
    assert all(r["passed"] and r["status"] == "identical" for r in explained)
    assert "miss(es) the routing caused" in flattened(out)


def test_round_robin_over_a_shared_storage_tier_meets_every_hit_from_the_other_worker(tmp_path):
    code, report, _ = replay(tmp_path, "router-round-robin-shared-storage")
    routing = report["routing"]
    assert code == 0 and report["verdict"] == "pass"
    assert routing["hit_rate"] == 1.0 and routing["routing_misses"] == 0
    assert report["summary"]["cached_tokens_by_tier"].get("storage", 0) > 0


def test_a_faulty_worker_behind_a_healthy_router_is_caught_and_named(tmp_path):
    """late-ssm-checkpoint breaks every hybrid hit on worker 1, and cache-aware routing gives
    each worker whole conversations, so worker 1's turns >= 1 fail and only they do. (A host-tier
    fault such as host-bf16 needs pool pressure, which halves when two workers share the load:
    docs/findings.md.)"""
    code, report, out = replay(tmp_path, "router-cache-aware", "--fault", "late-ssm-checkpoint")
    routing = report["routing"]
    assert code == 1 and report["verdict"] == "fail"
    assert routing["failing_workers"] == [1]
    assert routing["per_worker"][1]["fault"] == "late-ssm-checkpoint"
    assert routing["per_worker"][0]["fault"] is None
    assert all(r["worker"] == 1 for r in report["requests"] if not r["passed"])
    assert "failure(s) on worker 1" in flattened(out)
