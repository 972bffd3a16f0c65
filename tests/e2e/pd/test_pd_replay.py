"""Prefill/decode disaggregation on a CPU, end to end: SGLang 0.5.23's REAL servers in
`--disaggregation-mode prefill` / `decode`, the prompt's KV moved between them by Mooncake's
transfer engine over TCP (`mooncake_tcp`), behind sglang-router 0.3.2 in PD mode, launched as one
by the pd-* topologies (docs/topologies.md). A tiny random-weight Llama (bf16, seed 0), the
goldens recorded on sglang-cpu-reference (no cache, no PD). What is asserted is what was found:

- through sglang-router's MiniLB (pd-cpu-hicache-mini-lb) the prompt-only golden replays bit for
  bit in both repeats, its hits served by the prefill worker's host tier (`--require-tier host`
  met on the prefill side), every request naming its prefill and decode worker: KV moved between
  servers changed nothing;
- the multi-turn golden, which fails on one server (its follow-ups reuse KV that decode steps
  wrote: docs/sglang-cpu.md), replays bit for bit through PD: a prefill worker never holds what
  the decode worker wrote, so each follow-up reuses only its parent's prompt (512 tokens, a hit
  the PD hit rule accepts, not a miss) and prefills the rest, as the reference did;
- through the Rust PD router over the same two servers the same replay fails by 1 float64 ULP,
  tokens all identical: the router re-encodes every logprob of the answers it merges (and drops
  the flat top-k flags); no float32 value changed;
- a transfer that sends one page from the wrong offset (a test switch) is caught, and the failures
  are named by their (prefill, decode) pair.

One PD pair (and its two routers) serves the module; then the corrupting pair, one after another
(2 cores). Needs scripts/install_sglang_cpu.sh and scripts/install_router.sh (scripts/test.sh runs
both); skipped otherwise.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from replay.jobs.session import replay_golden
from replay.report.files import write_reports
from replay.run.replayer import ReplayOptions
from replay.server.launch import launched
from replay.server.pd_topology import pd_router_args
from replay.server.target import ServerTarget
from replay.server.topology import (
    PREFILL, RoutedURL, Topology, load_topology, router_profile, router_python, wait_for_workers,
)
from replay.server.transport import ClientOptions
from replay.sglang_cpu.locate import default_venv, install_hint
from replay.utils.errors import UsageError
from tests.support import paths
from tests.support.console import flattened

STAMP = default_venv() / ".golden-sglang-cpu-installed"
pytestmark = pytest.mark.skipif(not STAMP.is_file(), reason=install_hint())
try:
    router_python()
except UsageError as exc:
    pytest.skip(f"{exc}", allow_module_level=True)

ORDER = ("--concurrency", "1", "--schedule", "interleave")
CLIENT = ClientOptions(concurrency=1)
runner = CliRunner()


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pd")


@pytest.fixture(scope="module")
def model(cpu_model) -> str:
    return cpu_model  # the session's tiny Llama (tests/e2e/conftest.py)


@pytest.fixture(scope="module")
def goldens(cpu_goldens) -> dict[str, Path]:
    """The session's goldens, recorded on sglang-cpu-reference (radix cache off, no PD)."""
    return cpu_goldens


def replay(url: str, golden: Path, report: Path, **options: Any) -> dict[str, Any]:
    doc = replay_golden(golden, ServerTarget(url=url),
                        ReplayOptions(schedule="interleave", **options), CLIENT)
    write_reports(doc, report=report)  # kept for a failing run's reader
    return doc


@contextlib.contextmanager
def rust_router_over(routed: RoutedURL, log_dir: Path) -> Iterator[RoutedURL]:
    """SGLang's Rust PD router in front of the very servers `routed` runs (pd-cpu-hicache)."""
    workers = routed.topology.workers
    profile = load_topology("pd-cpu-hicache")
    flags = pd_router_args(profile, [(w.url, w.bootstrap_port) for w in workers
                                     if w.role == PREFILL],
                           [w.url for w in workers if w.role != PREFILL])
    log = log_dir / "rust-router.log"
    with launched(router_profile(profile, flags), model=None, log_path=log) as url:
        running = Topology(profile, url, log, workers)
        wait_for_workers(running)
        yield RoutedURL(running)


@pytest.fixture(scope="module")
def pd(work, model, goldens) -> dict[str, Any]:
    """pd-cpu-hicache-mini-lb launched as `--launch` does; the goldens replayed through MiniLB,
    then the prompt-only golden through the Rust router over the same two servers."""
    logs = work / "logs-pd"
    target = ServerTarget(profile="pd-cpu-hicache-mini-lb", model=model, log_dir=logs)
    with target.serving() as routed:
        prompt = replay(routed, goldens["cpu-prompt-reuse"], work / "mini-lb-prompt.json",
                        repeat=2, require_tier="host")
        branching = replay(routed, goldens["cpu-branching"], work / "mini-lb-branching.json")
        with rust_router_over(routed, logs) as rust:
            rust_prompt = replay(rust, goldens["cpu-prompt-reuse"], work / "rust-prompt.json")
        workers = routed.topology.describe()["workers"]
    return {"prompt": prompt, "branching": branching, "rust": rust_prompt, "workers": workers,
            "prefill_log": (logs / "pd-cpu-hicache-mini-lb-prefill0.log").read_text()}


def requests(doc: dict[str, Any], repeat: int | None = None) -> list[dict[str, Any]]:
    return [r for r in doc["requests"] if repeat is None or r["repeat"] == repeat]


def turn(request: dict[str, Any]) -> int:
    return int(request["id"].rsplit("/t", 1)[1])


# --- KV moved between servers changes nothing ------------------------------------------------

def test_the_prompt_only_golden_replays_bit_for_bit_through_real_pd_servers(pd):
    doc = pd["prompt"]
    assert doc["verdict"] == "pass", doc.get("error")
    assert {r["status"] for r in requests(doc)} == {"identical"}
    assert doc["summary"]["max_ulp"] == 0 and doc["summary"]["tokens_compared"] == 512


def test_every_request_names_its_prefill_and_its_decode_worker(pd):
    roles = {w["index"]: w["role"] for w in pd["workers"]}
    assert roles == {0: "prefill", 1: "decode"}
    pairs = {(r["prefill_worker"], r["decode_worker"]) for r in requests(pd["prompt"])}
    assert pairs == {(0, 1)}
    assert pd["prompt"]["routing"]["kind"] == "pd"
    assert pd["prompt"]["routing"]["pd_router"] == "mini-lb"


def test_the_host_tier_of_the_prefill_worker_serves_the_hits(pd):
    """--require-tier host is met: SGLang's decode worker reports the prefill worker's hit (its
    per-tier counts) as the request's, so a transferred prompt is neither a hit nor a miss."""
    doc = pd["prompt"]
    assert doc["summary"]["cached_tokens_by_tier"]["host"] > 0
    assert doc["summary"]["cache_misses"] == 0 and not doc.get("tier_problem")
    assert [r["cached_tokens"] for r in requests(doc, 0) if "/b0/" in r["id"]] == [0] * 8


def test_the_decode_worker_reuses_nothing_the_prefill_worker_holds_every_hit(pd):
    per = {w["role"]: w for w in pd["prompt"]["routing"]["per_worker"]}
    assert per["prefill"]["cached_tokens"] == sum(r["cached_tokens"]
                                                  for r in requests(pd["prompt"]))
    assert per["decode"]["cached_tokens"] == 0 and per["decode"]["requests"] == 64


def test_the_kv_travels_through_mooncakes_tcp_transport(pd):
    log = pd["prefill_log"]
    assert "mooncake_tcp' -> mooncake with MC_FORCE_TCP=1" in log
    assert "supports_host_tensor_indices = False" in log  # the CPU patch, and only it


# --- the multi-turn golden -------------------------------------------------------------------

def test_the_multi_turn_golden_replays_bit_for_bit_through_pd(pd):
    doc = pd["branching"]
    assert doc["verdict"] == "pass", doc.get("error")
    assert {r["status"] for r in requests(doc)} == {"identical"}
    assert doc["summary"]["max_ulp"] == 0


def test_follow_ups_reuse_their_parents_prompt_never_what_the_decode_worker_wrote(pd):
    """One server reuses 640 (576 prompt + 64 decoded); the prefill worker holds 512 of the
    prompt in whole pages and never the decoded tokens: the PD hit rule accepts it."""
    doc = pd["branching"]
    follow_ups = [r for r in requests(doc) if turn(r) == 1]
    assert [r["cached_tokens"] for r in follow_ups] == [512] * 4
    assert all("never its 160 output tokens" in r["routing_note"] for r in follow_ups)
    assert doc["routing"]["prompt_only_hits"] == 4 and doc["summary"]["cache_misses"] == 0


# --- the Rust PD router re-encodes logprobs --------------------------------------------------

def test_through_the_rust_pd_router_logprobs_are_off_by_one_float64_ulp_tokens_identical(pd):
    doc = pd["rust"]
    assert doc["verdict"] == "fail"
    assert doc["summary"]["max_ulp"] == 1  # never a float32 step (2**29 float64 ULPs)
    assert all(r["token_divergence_position"] is None for r in requests(doc))
    assert {(r["prefill_worker"], r["decode_worker"]) for r in requests(doc)} == {(0, 1)}
    assert doc["routing"]["attributed"] == 32  # from the Rust router's own log


# --- a corrupt transfer is caught and named --------------------------------------------------

@pytest.fixture(scope="module")
def corrupt(work, model, goldens) -> tuple[int, dict[str, Any], str]:
    report = work / "corrupt.json"
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "replay", str(goldens["cpu-prompt-reuse"]), "--launch",
         "tests/e2e/pd/pd-cpu-corrupt.toml", "--model", model, "--shard", "1/4", *ORDER,
         "--report", str(report), "--log-dir", str(work / "logs-corrupt")],
        capture_output=True, text=True, timeout=1200, cwd=paths.REPO)
    return proc.returncode, json.loads(report.read_text()), proc.stdout + proc.stderr


def test_a_page_sent_from_the_wrong_offset_is_caught_and_the_pair_named(corrupt):
    code, doc, out = corrupt
    assert code == 1 and doc["verdict"] == "fail"
    assert {r["status"] for r in requests(doc)} == {"token_divergence"}
    assert len(requests(doc)) == 8
    assert doc["routing"]["failing_pairs"] == [
        {"prefill_worker": 0, "decode_worker": 1, "failed": 8}]
    assert "8 failure(s) on pair prefill worker 0" in flattened(out)


def test_the_tokens_diverge_at_the_first_one_the_decode_worker_computed(corrupt):
    """The first output token comes from the prefill worker's own forward (it travels with the
    KV's metadata) and stays the golden's; the second is the first computed from the
    transferred pages. (Position 0's top-k can differ too: the Rust router's re-encoding.)"""
    _, doc, _ = corrupt
    assert [r["token_divergence_position"] for r in requests(doc)] == [1] * 8
