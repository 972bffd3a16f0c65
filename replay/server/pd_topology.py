"""A prefill/decode-disaggregated topology: prefill workers that compute a prompt's KV, decode
workers that receive it over a KV transfer backend and generate, and SGLang's router in PD mode
in front (`--pd-disaggregation`), launched and stopped as one by replay/server/topology.py.

KV moved between servers must change nothing, exactly like KV moved between cache tiers. The
profile (a `[topology]` table with `kind = "pd"`, fields in docs/topologies.md) names a launch
profile for each half: each is a real server in `--disaggregation-mode prefill` / `decode` with
its transfer backend. Every prefill worker gets a free bootstrap port of its own (the decode
worker asks it where to put the KV); the router is told each prefill URL with its bootstrap port
and each decode URL.

Attribution comes from the router's debug log: per request id it logs `Sending concurrent
requests prefill_url=... decode_url=...` for every attempt, then one `status_code=` line when
the request is answered. The attempt that answered is the pair that served it (a retried attempt
is not), in order (the k-th answer for an id is its k-th repeat).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from replay.server.apis import get_api
from replay.server.launch import http_status, log_tail_text, strip_ansi
from replay.utils.errors import ServerError, UsageError

PD_KIND = "pd"
PD_KEYS = {"description", "kind", "prefill_profile", "decode_profile", "prefill_workers",
           "decode_workers", "policy", "router", "router_args", "startup_timeout"}
PD_POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")
RUST, MINI_LB = "rust", "mini-lb"  # sglang-router's PD routers: its Rust one, or --mini-lb


@dataclass(frozen=True)
class PDTopologyProfile:
    name: str
    description: str
    prefill_profile: str  # a launch profile: a server in --disaggregation-mode prefill
    decode_profile: str  # a launch profile: a server in --disaggregation-mode decode
    prefill_workers: int = 1
    decode_workers: int = 1
    policy: str = "round_robin"  # the router's --policy, for both halves
    router: str = RUST  # MINI_LB: sglang-router's Python MiniLB (one pair, picked at random)
    router_args: tuple[str, ...] = ()
    startup_timeout: float = 600.0  # seconds for the router to see every worker healthy
    kind: str = PD_KIND
    shared_storage: bool = False  # the prefill workers share no storage tier

    def __post_init__(self) -> None:
        for what, n in (("prefill_workers", self.prefill_workers),
                        ("decode_workers", self.decode_workers)):
            if not 1 <= n <= 8:
                raise UsageError(f"topology {self.name!r}: {what} must be 1..8")
        if self.policy not in PD_POLICIES:
            raise UsageError(f"topology {self.name!r}: policy must be one of "
                             f"{', '.join(PD_POLICIES)}")
        if self.router not in (RUST, MINI_LB):
            raise UsageError(f"topology {self.name!r}: router must be {RUST} or {MINI_LB}")
        if self.router == MINI_LB and self.policy != "random":
            raise UsageError(f"topology {self.name!r}: the {MINI_LB} router picks at random "
                             "(no policy)")
        if self.router == MINI_LB and self.workers != 2:
            raise UsageError(f"topology {self.name!r}: the {MINI_LB} router logs no pairing, so "
                             "it takes one prefill and one decode worker (the only pair)")

    @property
    def workers(self) -> int:
        return self.prefill_workers + self.decode_workers

    @property
    def shape(self) -> str:
        """What runs, in a table cell: `1 x PREFILL + 1 x DECODE`."""
        return (f"{self.prefill_workers} x {self.prefill_profile} + "
                f"{self.decode_workers} x {self.decode_profile}")


def parse_pd_table(table: dict[str, Any], *, name: str, description: str) -> PDTopologyProfile:
    unknown = sorted(set(table) - PD_KEYS)
    if unknown:
        raise UsageError(f"topology {name!r}: unknown key(s) {', '.join(unknown)} "
                         "(a pd topology)")
    router = str(table.get("router", RUST))
    try:
        return PDTopologyProfile(
            name=name, description=description,
            prefill_profile=str(table["prefill_profile"]),
            decode_profile=str(table["decode_profile"]),
            prefill_workers=int(table.get("prefill_workers", 1)),
            decode_workers=int(table.get("decode_workers", 1)),
            policy=str(table.get("policy", "random" if router == MINI_LB else "round_robin")),
            router=router,
            router_args=tuple(str(a) for a in table.get("router_args", ())),
            startup_timeout=float(table.get("startup_timeout", 600.0)))
    except KeyError as exc:
        raise UsageError(f"topology {name!r}: missing key {exc.args[0]}") from None
    except (TypeError, ValueError) as exc:
        raise UsageError(f"topology {name!r}: {exc}") from None


def pd_router_args(topology: PDTopologyProfile, prefill: Sequence[tuple[str, int]],
                   decode: Sequence[str]) -> list[str]:
    """The router's PD flags: every prefill URL with its bootstrap port, every decode URL (and
    the policy: MiniLB has none, it picks at random)."""
    args = ["--mini-lb"] if topology.router == MINI_LB else []
    args += ["--pd-disaggregation"]
    for url, bootstrap_port in prefill:
        args += ["--prefill", url, str(bootstrap_port)]
    for url in decode:
        args += ["--decode", url]
    return args + (["--policy", topology.policy] if topology.router == RUST else [])


def enter_together(stack: contextlib.ExitStack, managers: Sequence[Any]) -> list[str]:
    """Enter every launch at once (each waits for its own server's health), register the exit
    of every one that started, then raise the first failure, if any."""
    pool = ThreadPoolExecutor(max_workers=len(managers))
    futures = [pool.submit(m.__enter__) for m in managers]
    try:
        wait(futures)
    finally:
        pool.shutdown(wait=True)
        for m, f in zip(managers, futures):
            if not f.cancelled() and f.exception() is None:
                stack.push(m.__exit__)
    for f in futures:
        failure = f.exception()
        if failure is not None:
            raise failure
    return [f.result() for f in futures]


def warm_up_pair(topology: PDTopologyProfile, router_url: str,
                 worker_logs: Sequence[tuple[str, Path | None]], api_key: str | None = None) -> None:
    """One tiny generation through the PD router: prefill, KV transfer, decode (the workers' own
    warm-ups skip the transfer: SGLang's fake bootstrap host). A failure names every log tail."""
    path, body = get_api("sglang").request(np.arange(1, 9, dtype=np.int32), 2, 0)
    status = http_status("POST", router_url + path, body=body, timeout=topology.startup_timeout,
                         api_key=api_key)
    if status == 200:
        return
    what = "no answer" if status is None else f"HTTP {status}"
    tails = "; ".join(f"{label}: {log_tail_text(log)}" for label, log in worker_logs if log)
    raise ServerError(f"topology {topology.name!r}: a generation through the PD router got "
                      f"{what} (the KV transfer between prefill and decode failed?); {tails}")


_ID = re.compile(r'request_id="([^"]+)"')
_SENT = re.compile(r"Sending concurrent requests prefill_url=(\S+) decode_url=(\S+)")
_ANSWERED = re.compile(r'request_id="[^"]+" status_code=')


def read_pd_attribution(router_log: Path, worker_index: dict[str, int]
                        ) -> dict[str, list[tuple[int, int]]]:
    """request id -> (prefill worker, decode worker) indexes of the attempt that was answered,
    once per answer, in order. An attempt never answered (the log ends first) still counts."""
    served: dict[str, list[tuple[int, int]]] = {}
    pending: dict[str, tuple[int, int]] = {}
    try:
        text = router_log.read_text(errors="replace")
    except OSError:
        return served
    for line in text.splitlines():
        line = strip_ansi(line)
        found = _ID.search(line)
        if not found:
            continue
        rid = found.group(1)
        sent = _SENT.search(line)
        if sent:
            pair = (_index(sent.group(1), worker_index), _index(sent.group(2), worker_index))
            if None not in pair:
                pending[rid] = pair  # type: ignore[assignment]
        elif _ANSWERED.search(line) and rid in pending:
            served.setdefault(rid, []).append(pending.pop(rid))
    for rid, pair in pending.items():
        served.setdefault(rid, []).append(pair)
    return served


def _index(url: str, worker_index: dict[str, int]) -> int | None:
    url = url.rstrip("/")
    for base, index in worker_index.items():
        if url == base or url.startswith(base + "/"):
            return index
    return None
