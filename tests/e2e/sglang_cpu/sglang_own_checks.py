"""SGLang's own L3 checks (sgl-project/sglang, test/registered/hicache/), rewritten to run against
the same CPU server and tiny model as the golden replay, beside it (docs/sglang-cpu.md, "SGLang's
own L3 tests beside the replay"). What had to change, and why:

- `HiCacheStorageBaseMixin.test_basic_backup_and_prefetch` sends a random 768-token text prompt
  (150 new tokens), a 1-token prompt to trigger offloading, POST /flush_cache, then the first
  prompt again, and asserts `cached_tokens > 700`. Here the prompts are token ids (the tiny
  model has no tokenizer: --skip-tokenizer-init), drawn from its 4,096-token vocabulary with a
  fixed seed, and the long one has 832 tokens: its pages are 64 tokens, ours 128, and a hit
  never covers a prompt's last token, so of 768 at most 640 could hit; the rest is the same. Its accuracy test (GSM8K, 200 questions, a 3-point
  tolerance) needs a real model and the data set: not run.
- `test_hicache_storage_runtime_attach_detach` checks the control plane on a server started
  without L3: status, attach (file), re-attach with other policies, a different backend refused,
  detach (twice), re-attach. Here the same steps (its phase B) against the file backend's server,
  started with `--admin-api-key` and L3 attached, so it is detached first; its phase A (a
  server without an admin key answers 400) needs a server of its own and is not run.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any
import time
from urllib import error, request

VOCAB = 4096


def http(method: str, url: str, payload: Any = None, key: str | None = None,
         timeout: float = 120) -> tuple[int, str]:
    data = json.dumps(payload).encode() if payload is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = request.Request(url, data=data, headers=headers, method=method)
    try:
        with request.urlopen(req, timeout=timeout) as resp:
            return resp.getcode(), resp.read().decode()
    except error.HTTPError as exc:
        return exc.code, exc.read().decode()


def generate(url: str, ids: list[int], max_new_tokens: int) -> dict[str, Any]:
    code, body = http("POST", f"{url}/generate", {
        "input_ids": ids,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens,
                            "ignore_eos": True}})
    assert code == 200, body
    return json.loads(body)


def basic_backup_and_prefetch(url: str, key: str | None = None, seed: int = 0) -> int:
    """SGLang's test_basic_backup_and_prefetch: the second request's cached_tokens (it passes
    when > 700)."""
    rng = random.Random(seed)
    base = [rng.randrange(3, VOCAB) for _ in range(832)]
    generate(url, base, 150)
    generate(url, [rng.randrange(3, VOCAB)], 150)  # trigger offloading
    code, body = http("POST", f"{url}/flush_cache?timeout=30", key=key)
    assert code == 200, body
    again = generate(url, base, 150)
    return int(again["meta_info"].get("cached_tokens", 0))


@dataclass
class AttachDetach:
    """The steps of SGLang's runtime attach/detach test and what each answered."""

    steps: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        s = self.steps
        return (s["detach_first"] == 200 and s["status_unauthorized"] == 401 and s["status_before"] is None
                and s["attach_unauthorized"] == 401 and s["attach"] == 200
                and s["status_after_attach"] == ("file", "timeout", "write_back")
                and s["reattach"] == 200
                and s["status_after_reattach"] == ("file", "wait_complete",
                                                   "write_through_selective")
                and s["attach_other_backend"] != 200
                and s["detach"] == 200 and s["status_after_detach"] is None
                and s["detach_again"] == 200 and s["attach_after_detach"] == 200)


def detach_when_idle(url: str, admin_key: str, deadline_s: float = 120) -> tuple[int, int]:
    """DELETE the storage backend, again while SGLang refuses it as not idle (in-flight L3
    backups count: `Scheduler.is_fully_idle`): (the last status, how many were refused)."""
    refused, end = 0, time.monotonic() + deadline_s
    while True:
        code, body = http("DELETE", f"{url}/hicache/storage-backend", key=admin_key)
        if code != 400 or "not idle" not in body or time.monotonic() > end:
            return code, refused
        refused += 1
        time.sleep(0.5)


def attach_detach(url: str, admin_key: str) -> AttachDetach:
    def attach(backend: str, prefetch: str = "timeout", write: str = "write_through",
               key: str | None = admin_key) -> int:
        return http("PUT", f"{url}/hicache/storage-backend", {
            "hicache_storage_backend": backend,
            "hicache_storage_backend_extra_config_json": json.dumps(extra),
            "hicache_storage_prefetch_policy": prefetch,
            "hicache_write_policy": write}, key=key)[0]

    def status() -> Any:
        code, body = http("GET", f"{url}/hicache/storage-backend", key=admin_key)
        assert code == 200, body
        doc = json.loads(body)
        if doc.get("hicache_storage_backend") is None:
            return None
        return (doc["hicache_storage_backend"], doc["hicache_storage_prefetch_policy"],
                doc["hicache_write_policy"])

    extra = {"prefetch_threshold": 256, "prefetch_timeout_base": 3,
             "prefetch_timeout_per_ki_token": 0.01}
    r = AttachDetach()
    # the file server started with L3 attached: SGLang's test starts from a server without it,
    # so idle; here the backups of the check before may still drain (SGLang refuses with 400
    # "scheduler is not idle" until they have), so this one step waits for idle
    r.steps["detach_first"], r.steps["detach_first_refused_not_idle"] = detach_when_idle(
        url, admin_key)
    r.steps["status_unauthorized"] = http("GET", f"{url}/hicache/storage-backend")[0]
    r.steps["status_before"] = status()
    r.steps["attach_unauthorized"] = attach("file", key=None)
    r.steps["attach"] = attach("file", "timeout", "write_back")
    r.steps["status_after_attach"] = status()
    r.steps["reattach"] = attach("file", "wait_complete", "write_through_selective")
    r.steps["status_after_reattach"] = status()
    r.steps["attach_other_backend"] = attach("mooncake")
    r.steps["detach"] = http("DELETE", f"{url}/hicache/storage-backend", key=admin_key)[0]
    r.steps["status_after_detach"] = status()
    r.steps["detach_again"] = http("DELETE", f"{url}/hicache/storage-backend", key=admin_key)[0]
    r.steps["attach_after_detach"] = attach("file")
    http("DELETE", f"{url}/hicache/storage-backend", key=admin_key)
    return r
