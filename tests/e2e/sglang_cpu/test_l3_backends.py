"""SGLang 0.5.23's L3 storage backends on its REAL CPU server (docs/sglang-cpu.md, "L3 storage
backends"): the prompt-only golden (cpu-prompt-reuse, recorded once on the reference server,
conftest.py) replayed twice on each sglang-cpu-hicache-<backend> server, whose host pool is no
larger than its device pool so that every shared prefix is served from L3 (storage -> host ->
device), `--require-tier storage`. Before each repeat the replay empties L3 through the backend's
own clear (POST /hicache/storage-backend/clear). What is asserted is what was seen:

- file, mooncake (its own master, TCP), hf3fs (SGLang's metadata server, mock client) and nixl
  (POSIX plugin) replay bit for bit with storage-tier hits;
- mooncake's clear leaves every object read within its lease (10 s) in the store, so
  repeat 2's first branches are served from L3 (the report's warning says so);
- sim stores keys only and serves no bytes: the replay fails exactly where it served a hit;
- shm never serves from L3 (a stub): the replay fails `--require-tier storage`;
- SGLang's own L3 checks (sglang_own_checks.py), run on the same servers beside the replay,
  pass on every backend, sim included: they look at hit lengths and HTTP answers, not bits;
- L3 attached, and detached, over HTTP while a replay runs: the replay stays bit for bit.

One server per backend, one after another (2 cores), each shared by the module. Needs
`bash scripts/install_sglang_cpu.sh` (which installs the backends' packages; scripts/test.sh runs
it); skipped otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from replay.server.launch import launched
from replay.server.profile import load_profile
from replay.sglang_cpu.locate import install_hint
from tests.e2e.sglang_cpu import sglang_own_checks as own
from tests.support.sglang_cpu import ORDER, STAMP, Replayed, replay, requests
from tests.support.console import flattened
from tests.support.pausing_proxy import pausing_proxy

pytestmark = pytest.mark.skipif(not STAMP.is_file(), reason=install_hint())

BIT_EXACT = ("file", "mooncake", "hf3fs", "nixl", "seaweedfs")
# Their backups land before a prefix's next branch comes. SeaweedFS's go over HTTP to its own
# server and sometimes lag (docs/sglang-cpu.md, "L3 storage backends"): a later branch then finds
# its prefix still in host, or not yet anywhere.
BACKED_UP_IN_TIME = ("file", "mooncake", "hf3fs", "nixl")
CLEARED = ("file", "hf3fs", "nixl", "seaweedfs")  # their clear empties L3: repeats start cold
ADMIN_KEY = "golden-l3-admin"  # the file server's --admin-api-key (attach/detach need one)


class Backends:
    """Each backend's server started once, on first use: the golden's replay, then SGLang's own
    backup-and-prefetch check on the same server (and on the file server its attach/detach test
    and L3 attached and detached while a replay runs)."""

    def __init__(self, work, model, golden) -> None:
        self.work, self.model, self.golden = work, model, golden
        self.runs: dict[str, dict[str, Any]] = {}

    def __getitem__(self, backend: str) -> dict[str, Any]:
        if backend not in self.runs:
            name = f"sglang-cpu-hicache-{backend}"
            log = self.work / "logs" / f"{name}.log"
            admin = ["--admin-api-key", ADMIN_KEY] if backend == "file" else []
            # with an admin key SGLang wants it on /server_info and /flush_cache too
            keys = ["--api-key", ADMIN_KEY, *admin] if admin else []
            with launched(load_profile(name), model=self.model, log_path=log,
                          extra_args=admin) as url:
                run = {"prompt": replay(url, self.golden, self.work / f"{backend}-prompt.json",
                                        "--repeat", "2", "--require-tier", "storage", *keys),
                       "sglang_hit": own.basic_backup_and_prefetch(url, ADMIN_KEY if admin else None)}
                if backend == "file":
                    run["attach_detach"] = own.attach_detach(url, ADMIN_KEY)
                    # attached once the first branches ran (the third and fourth are then
                    # served from L3 the second ones wrote); detached once the second branches
                    # were served from L3 (without any hit the replay would fail for that alone)
                    run["attached_mid_replay"] = self.during_replay(url, "PUT", 8)
                    run["detached_mid_replay"] = self.during_replay(url, "DELETE", 16)
            run["log"] = log.read_text()
            self.runs[backend] = run
        return self.runs[backend]

    def during_replay(self, url: str, method: str, after: int) -> dict[str, Any]:
        """A replay of the golden (one repeat) in its own process while L3 is attached (PUT) or
        detached (DELETE) over HTTP once `after` of its requests were answered: the replay goes
        through a proxy that holds its next request until the change landed (SGLang refuses it
        while a request runs; retried while the server finishes what it was doing, e.g.
        backups). Returns the replay, the change's answers and when it ran."""
        report = self.work / f"file-{method.lower()}-mid-replay.json"
        payload = {"hicache_storage_backend": "file",
                   "hicache_storage_prefetch_policy": "wait_complete",
                   "hicache_write_policy": "write_through"} if method == "PUT" else None
        answers: list[int] = []

        def change() -> None:
            deadline = time.monotonic() + 120
            while (not answers or answers[-1] != 200) and time.monotonic() < deadline:
                answers.append(own.http(method, f"{url}/hicache/storage-backend", payload,
                                        key=ADMIN_KEY)[0])
                if answers[-1] != 200:
                    time.sleep(0.1)

        with pausing_proxy(url, after, change) as proxy:
            proc = subprocess.Popen([sys.executable, "-m", "cli", "replay", str(self.golden),
                                     "--server", proxy["url"], "--report", str(report), *ORDER,
                                     "--quiet", "--api-key", ADMIN_KEY, "--admin-api-key", ADMIN_KEY],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            output = proc.communicate(timeout=600)[0].decode()
        return {"code": proc.returncode, "doc": json.loads(report.read_text()),
                "answers": answers, "ran_after": proxy["ran_after"], "output": output}


@pytest.fixture(scope="module")
def backends(cpu_work, cpu_model, cpu_goldens) -> Backends:
    return Backends(cpu_work, cpu_model, cpu_goldens["cpu-prompt-reuse"])


def storage(q: dict[str, Any]) -> int:
    return (q["cached_tokens_details"] or {}).get("storage", 0)


def first_branches(doc: dict[str, Any], repeat: int) -> list[dict[str, Any]]:
    return [q for q in requests(doc, repeat) if "/b0/" in q["id"]]


@pytest.mark.parametrize("backend", BIT_EXACT)
def test_the_prompt_only_golden_replays_bit_for_bit_with_storage_tier_hits(backends, backend):
    r: Replayed = backends[backend]["prompt"]
    assert r.code == 0, r.output
    assert r.doc["verdict"] == "pass" and r.doc["storage_cleared"] == 2
    assert {q["status"] for q in requests(r.doc)} == {"identical"}
    assert r.doc["summary"]["cached_tokens_by_tier"]["storage"] > 0


@pytest.mark.parametrize("backend", BACKED_UP_IN_TIME)
def test_every_later_branch_of_a_group_is_served_from_storage(backends, backend):
    """Host pool = device pool: by the time a prefix's next branch comes, seven other prefixes
    have pushed it out of both, so its hit can only come from L3."""
    doc = backends[backend]["prompt"].doc
    later = [q for q in requests(doc) if "/b0/" not in q["id"]]
    assert later and all(storage(q) == q["cached_tokens"] > 0 for q in later)


def test_on_seaweedfs_every_later_branch_hit_is_reported_by_the_tier_it_came_from(backends):
    """Where SeaweedFS's backups lag, a hit comes from host or from storage, never from both and
    never uncounted; the bits are identical whichever (the replay test above)."""
    doc = backends["seaweedfs"]["prompt"].doc
    later = [q for q in requests(doc) if "/b0/" not in q["id"]]
    assert any(storage(q) > 0 for q in later)
    for q in later:
        tiers = {t: n for t, n in (q["cached_tokens_details"] or {}).items() if n}
        assert sum(tiers.values()) == q["cached_tokens"] and len(tiers) <= 1, q


@pytest.mark.parametrize("backend", CLEARED)
def test_the_backends_own_clear_empties_l3_before_each_repeat(backends, backend):
    doc = backends[backend]["prompt"].doc
    for repeat in (0, 1):
        assert [q["cached_tokens"] for q in first_branches(doc, repeat)] == [0] * 8


def test_mooncakes_clear_keeps_the_objects_its_lease_protects(backends):
    """MooncakeStore.clear() calls remove_all() without force: Mooncake's master then removes
    only objects whose lease (default_kv_lease_ttl, 10 s after the last read) has expired, and
    SGLang reports the store cleared (scripts/sglang_cpu/mooncake_clear_repro.py shows it alone). The replay's first branches of repeat 2 are
    served from L3 (still bit for bit: the objects are the same pages)."""
    run = backends["mooncake"]
    doc = run["prompt"].doc
    assert [storage(q) for q in first_branches(doc, 0)] == [0] * 8
    stale = [q["id"] for q in first_branches(doc, 1) if storage(q) > 0]
    assert stale, "every first branch of repeat 2 started cold"
    flagged = {h["id"] for h in doc["storage_hits_after_clear"] if h["repeat"] == 1}
    assert set(stale) <= flagged
    assert any("the clear did not empty the tier" in w for w in doc["warnings"])
    assert run["log"].count("Hierarchical cache storage backend cleared successfully!") == 2


def test_the_shm_backend_never_serves_from_l3_so_the_replay_fails(backends):
    """shm switches the host pool to shared memory; its L3 side is a stub (exists() is always
    False), and with the host pool this tight nothing is hit at all."""
    r = backends["shm"]["prompt"]
    assert r.code == 1 and r.doc["verdict"] == "fail"
    assert {q["status"] for q in requests(r.doc)} == {"identical"}
    assert all(storage(q) == 0 for q in requests(r.doc))
    assert "no cache hits came from the storage tier" in flattened(r.output)


def test_a_backend_that_serves_no_bytes_fails_exactly_where_it_served_a_hit(backends):
    """sim keeps keys only ("served KV is garbage -- benchmark-only"): every request it served
    from L3 diverges, every other one is identical."""
    r = backends["sim"]["prompt"]
    assert r.code == 1 and r.doc["verdict"] == "fail"
    served = [q for q in requests(r.doc) if storage(q) > 0]
    assert served and all(q["status"] != "identical" for q in served)
    assert {q["status"] for q in requests(r.doc) if storage(q) == 0} == {"identical"}


# --- SGLang's own L3 checks on the same servers -----------------------------------------------

@pytest.mark.parametrize("backend", (*BIT_EXACT, "sim"))
def test_sglangs_own_backup_and_prefetch_check_passes_on_every_backend(backends, backend):
    """Its bar (> 700 of 832 tokens from L3 after a flush) is met by sim too: a hit length
    cannot tell served bytes from garbage."""
    assert backends[backend]["sglang_hit"] > 700


def test_sglangs_own_check_fails_where_l3_never_serves(backends):
    assert backends["shm"]["sglang_hit"] <= 700


def test_sglangs_own_attach_detach_lifecycle_passes_on_the_cpu_server(backends):
    result = backends["file"]["attach_detach"]
    assert result.passed, result.steps


# --- L3 attached or detached while a replay runs ----------------------------------------------

@pytest.mark.parametrize("change", ["attached_mid_replay", "detached_mid_replay"])
def test_l3_changed_over_http_during_a_replay_keeps_it_bit_for_bit(backends, change):
    run = backends["file"][change]
    assert run["ran_after"] == (8 if change == "attached_mid_replay" else 16)
    assert run["answers"][-1] == 200, run["answers"]  # it landed between two requests
    assert run["code"] == 0, run["output"][-2000:]
    assert {q["status"] for q in requests(run["doc"])} == {"identical"}


def test_after_l3_is_attached_mid_replay_later_requests_are_served_from_it(backends):
    doc = backends["file"]["attached_mid_replay"]["doc"]
    assert any(storage(q) > 0 for q in requests(doc))
