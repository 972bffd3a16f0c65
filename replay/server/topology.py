"""A topology: N workers behind SGLang's router (the real `sglang-router` from PyPI), launched and
stopped as one, and which worker served each request.

When a deployment outgrows one server, a conversation's next turn is only a cache hit if the
router sends it to the worker holding its prefix. A topology profile (TOML in
`replay/server/topologies/`, fields in docs/topologies.md) names the worker profile, how many,
the routing policy and, optionally, a storage directory all workers share and what each worker
gets of its own (`worker_args` / `worker_env` with `{worker}`: replay/server/topology_workers.py,
so worker i can be put on GPU i). Every worker is a launch of its own (health, warm-up,
watchdog, log) through `launch.launched`; the router is one more. `--fault F` goes to one worker only (`fault_worker`), so a faulty worker behind a healthy
router can be caught and named.

Attribution comes from the router: the transport sends each request's id as `X-Request-Id`, the
router (started with `--log-level debug`) logs `request_id="..."` with the worker URL it sent it
to, and `Topology.attribution()` reads that back (topology_workers.read_attribution), in order (the k-th time an id appears is its
k-th repeat). Nothing here knows a request's meaning; replay/jobs/routing.py judges with it.

A topology of `kind = "pd"` (replay/server/pd_topology.py) is prefill and decode workers behind
the router in PD mode: launched the same way (the workers in parallel, each prefill worker with
a bootstrap port of its own), then one generation through the router before the replay starts,
so that a KV transfer that cannot work fails here, with the workers' logs, not mid-replay.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from replay.server.launch import free_port, http_status, launched
from replay.server.pd_topology import (
    MINI_LB, PD_KIND, PDTopologyProfile, enter_together, parse_pd_table, pd_router_args,
    read_pd_attribution, warm_up_pair,
)
from replay.server.profile import LOOPBACK, LaunchProfile, Notify, check_values, load_profile
from replay.server.topology_workers import (
    parse_worker_templates, read_attribution, shared_directory, worker_launch,
)
from replay.utils.errors import ServerError, UsageError

ROUTER_PYTHON_ENV = "GOLDEN_ROUTER_PYTHON"
DEFAULT_ROUTER_VENV = Path.home() / ".cache" / "golden-replay" / "router-venv"
POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")
TOPOLOGY_KEYS = {"description", "kind", "workers", "worker_profile", "policy", "fault_worker",
                 "shared_storage", "router_args", "startup_timeout", "worker_args", "worker_env",
                 "worker_startup_timeout"}
INSTALL_HINT = "bash scripts/install_router.sh"


@dataclass(frozen=True)
class TopologyProfile:
    name: str
    description: str
    workers: int
    worker_profile: str
    policy: str
    fault_worker: int  # the worker `--fault` goes to (0-based)
    shared_storage: bool = False  # one storage directory for every worker (`{shared_storage}`)
    router_args: tuple[str, ...] = ()
    worker_args: tuple[str, ...] = ()  # appended to each worker's argv, `{worker}` filled
    worker_env: Mapping[str, str] = field(default_factory=dict)  # set in each worker's env
    worker_startup_timeout: float | None = None  # a worker's health + warm-up; None: its profile's
    startup_timeout: float = 120.0  # seconds for the router to see every worker healthy
    kind: str = "router"  # N interchangeable workers (PD topologies: PDTopologyProfile)

    @property
    def shape(self) -> str:
        return f"{self.workers} x {self.worker_profile}"

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= 16:
            raise UsageError(f"topology {self.name!r}: workers must be 1..16")
        if self.policy not in POLICIES:
            raise UsageError(f"topology {self.name!r}: policy must be one of {', '.join(POLICIES)}")
        if not 0 <= self.fault_worker < self.workers:
            raise UsageError(f"topology {self.name!r}: fault_worker must be 0..{self.workers - 1}")


AnyTopologyProfile = TopologyProfile | PDTopologyProfile
WORKER, PREFILL, DECODE = "worker", "prefill", "decode"  # a worker's role


@dataclass(frozen=True)
class Worker:
    index: int  # unique in its topology (PD: prefill workers first, then decode workers)
    url: str
    fault: str | None
    role: str = WORKER
    bootstrap_port: int | None = None  # a prefill worker's KV bootstrap server
    log: Path | None = None

    @property
    def label(self) -> str:
        return f"worker {self.index}" if self.role == WORKER else f"{self.role} worker {self.index}"


@dataclass
class Topology:
    """A running topology: the router's URL (what the client talks to) and its workers."""

    profile: AnyTopologyProfile
    router_url: str
    router_log: Path
    workers: list[Worker] = field(default_factory=list)

    def attribution(self) -> dict[str, list[int]]:
        """request id -> the index of the worker the router sent it to, once per time it was
        sent (repeats in order)."""
        return read_attribution(self.router_log, self.by_url())

    def pd_attribution(self) -> dict[str, list[tuple[int, int]]]:
        """PD: request id -> (prefill worker, decode worker) of each answered attempt, in order.
        MiniLB logs nothing: every request has its only pair (`sole_pair`)."""
        return read_pd_attribution(self.router_log, self.by_url())

    def sole_pair(self) -> tuple[int, int] | None:
        """The (prefill, decode) pair of a PD topology with one worker of each, else None."""
        prefill = [w.index for w in self.workers if w.role == PREFILL]
        decode = [w.index for w in self.workers if w.role == DECODE]
        return (prefill[0], decode[0]) if len(prefill) == len(decode) == 1 else None

    def by_url(self) -> dict[str, int]:
        return {w.url.rstrip("/"): w.index for w in self.workers}

    def describe(self) -> dict[str, Any]:
        out = {"profile": self.profile.name, "kind": self.profile.kind,
               "policy": self.profile.policy, "shared_storage": self.profile.shared_storage,
               "router": self.router_url,
               "workers": [{"index": w.index, "url": w.url, "fault": w.fault} for w in self.workers]}
        if isinstance(self.profile, PDTopologyProfile):
            out["pd_router"] = self.profile.router
            for entry, w in zip(out["workers"], self.workers):
                entry.update(role=w.role, bootstrap_port=w.bootstrap_port)
        return out


class RoutedURL(str):
    """The router's URL, carrying the running topology (what `ServerTarget.serving` yields for
    a topology profile, so the session can ask who served what)."""

    topology: Topology

    def __new__(cls, topology: Topology) -> "RoutedURL":
        url = super().__new__(cls, topology.router_url)
        url.topology = topology
        return url


# ---------------------------------------------------------------------------------------------
# Profiles
# ---------------------------------------------------------------------------------------------


def builtin_topology_names() -> list[str]:
    folder = resources.files("replay.server") / "topologies"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def is_topology(name_or_path: str) -> bool:
    if name_or_path in builtin_topology_names():
        return True
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.is_file():
        try:
            return "topology" in tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            return False
    return False


def load_topology(name_or_path: str) -> AnyTopologyProfile:
    if name_or_path in builtin_topology_names():
        text = (resources.files("replay.server") / "topologies" / f"{name_or_path}.toml").read_text()
        return parse_topology(text, name=name_or_path)
    path = Path(name_or_path)
    try:
        return parse_topology(path.read_text(), name=path.stem)
    except OSError as exc:
        raise UsageError(f"topology {name_or_path}: {exc.strerror}") from None


def parse_topology(text: str, *, name: str) -> AnyTopologyProfile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"topology {name!r}: not valid TOML ({exc})") from None
    table = data.get("topology")
    if not isinstance(table, dict):
        raise UsageError(f"topology {name!r}: no [topology] table")
    description = str(data.get("description", table.get("description", "")))
    if table.get("kind", "router") == PD_KIND:
        return parse_pd_table(table, name=name, description=description)
    if table.get("kind", "router") != "router":
        raise UsageError(f"topology {name!r}: kind must be router or {PD_KIND}")
    unknown = sorted(set(table) - TOPOLOGY_KEYS)
    if unknown:
        raise UsageError(f"topology {name!r}: unknown key(s) {', '.join(unknown)}")
    try:
        workers = int(table.get("workers", 2))
        shared = bool(table.get("shared_storage", False))
        worker_args, worker_env = parse_worker_templates(table, name=name, shared_storage=shared)
        return TopologyProfile(
            name=name, description=description, workers=workers, worker_profile=str(table["worker_profile"]),
            policy=str(table.get("policy", "cache_aware")),
            fault_worker=int(table.get("fault_worker", workers - 1)),
            shared_storage=shared,
            router_args=tuple(str(a) for a in table.get("router_args", ())),
            startup_timeout=float(table.get("startup_timeout", 120.0)),
            worker_args=worker_args, worker_env=worker_env,
            worker_startup_timeout=(float(table["worker_startup_timeout"])
                                    if "worker_startup_timeout" in table else None))
    except KeyError as exc:
        raise UsageError(f"topology {name!r}: missing key {exc.args[0]}") from None
    except (TypeError, ValueError) as exc:
        raise UsageError(f"topology {name!r}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Launch
# ---------------------------------------------------------------------------------------------


def router_python() -> str:
    """The interpreter that has `sglang_router` (its own venv: scripts/install_router.sh)."""
    given = os.environ.get(ROUTER_PYTHON_ENV)
    python = Path(given) if given else DEFAULT_ROUTER_VENV / "bin" / "python"
    if not python.is_file():
        raise UsageError(f"SGLang's router is not installed ({python} is missing): run "
                         f"{INSTALL_HINT}, or set {ROUTER_PYTHON_ENV}")
    return str(python)


def router_profile(topology: AnyTopologyProfile, worker_args: Sequence[str]) -> LaunchProfile:
    """The router over the workers `worker_args` name (`--worker-urls ...`, or the PD flags)."""
    command = (router_python(), "-m", "sglang_router.launch_router", *worker_args,
               "--host", "{host}", "--port", "{port}", "--log-level", "debug",
               # its metrics listener, else on a fixed port that two routers cannot share
               "--prometheus-host", LOOPBACK, "--prometheus-port", str(free_port()),
               *topology.router_args)
    return LaunchProfile(name=f"{topology.name}-router",
                         description=f"sglang-router ({topology.kind}, {topology.policy})",
                         command=command,
                         startup_timeout=topology.startup_timeout, stop_timeout=10.0,
                         warmup=False)


def launched_topology(topology: AnyTopologyProfile, *, model: str | None, log_dir: Path,
                      fault: str | None = None, extra_args: Sequence[str] = (),
                      notify: Notify | None = None, api_key: str | None = None,
                      extra_env: Mapping[str, str] | None = None,
                      attention_backend: str | None = None,
                      ) -> contextlib.AbstractContextManager[RoutedURL]:
    """Start every worker, then the router over them; yield the router's URL once it sees every
    worker healthy; always stop them all (router first). `extra_env` goes to every process (over
    a topology's `worker_env`: a caller's rule such as NVLink multicast off wins), the
    `attention_backend` to every worker of a router topology (its profile must take one)."""
    given = {"model": model, "log_dir": Path(log_dir), "fault": fault, "extra_args": extra_args,
             "notify": notify, "api_key": api_key, "extra_env": extra_env or {}}
    if not isinstance(topology, PDTopologyProfile):
        return _launched_workers(topology, attention_backend=attention_backend, **given)
    if attention_backend:
        raise UsageError("--attention-backend does not apply to a PD topology")
    return _launched_pd(topology, **given)


@contextlib.contextmanager
def _launched_workers(topology: TopologyProfile, *, model: str | None, log_dir: Path,
                      fault: str | None, extra_args: Sequence[str], notify: Notify | None,
                      api_key: str | None, extra_env: Mapping[str, str],
                      attention_backend: str | None) -> Iterator[RoutedURL]:
    worker_profile = load_profile(topology.worker_profile)
    if topology.worker_startup_timeout:
        worker_profile = replace(worker_profile, startup_timeout=topology.worker_startup_timeout)
    if attention_backend:  # one that the workers cannot take: refused before anything starts
        check_values(worker_profile, model=model, fault=None, attention_backend=attention_backend)
    log_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        shared = (stack.enter_context(shared_directory(log_dir, topology.name))
                  if topology.shared_storage else None)
        workers = []
        for i in range(topology.workers):
            worker_fault = fault if i == topology.fault_worker else None
            own_args, own_env = worker_launch(topology.worker_args, topology.worker_env, i, shared)
            url = stack.enter_context(launched(
                worker_profile, model=model, log_path=log_dir / f"{topology.name}-worker{i}.log",
                fault=worker_fault, extra_args=[*extra_args, *own_args], notify=notify,
                api_key=api_key, attention_backend=attention_backend,
                extra_env={**own_env, **extra_env}))
            workers.append(Worker(i, url, worker_fault))
        router_log = log_dir / f"{topology.name}-router.log"
        flags = ["--worker-urls", *(w.url for w in workers), "--policy", topology.policy]
        url = stack.enter_context(launched(router_profile(topology, flags), model=None,
                                           log_path=router_log, notify=notify,
                                           extra_env=extra_env))
        running = Topology(topology, url, router_log, workers)
        wait_for_workers(running, api_key)
        if notify:
            notify(f"topology {topology.name}: sglang-router ({topology.policy}) at {url} over "
                   + ", ".join(f"{w.label} {w.url}" + (f" (fault {w.fault})" if w.fault else "")
                               for w in workers))
        yield RoutedURL(running)


@contextlib.contextmanager
def _launched_pd(topology: PDTopologyProfile, *, model: str | None, log_dir: Path,
                 fault: str | None, extra_args: Sequence[str], notify: Notify | None,
                 api_key: str | None, extra_env: Mapping[str, str]) -> Iterator[RoutedURL]:
    """Prefill and decode workers started together (each prefill worker with its own bootstrap
    port; `--fault` goes to prefill worker 0), then the router in PD mode, then one generation
    through it: the transfer works before the replay starts."""
    prefill_profile, decode_profile = (load_profile(topology.prefill_profile),
                                       load_profile(topology.decode_profile))
    log_dir.mkdir(parents=True, exist_ok=True)
    planned = [Worker(i, "", fault if i == 0 else None, PREFILL, free_port(),
                      log_dir / f"{topology.name}-prefill{i}.log")
               for i in range(topology.prefill_workers)]
    planned += [Worker(len(planned) + i, "", None, DECODE, None,
                       log_dir / f"{topology.name}-decode{i}.log")
                for i in range(topology.decode_workers)]
    with contextlib.ExitStack() as stack:
        urls = enter_together(stack, [launched(
            prefill_profile if w.role == PREFILL else decode_profile, model=model,
            log_path=w.log, fault=w.fault, notify=notify, api_key=api_key, extra_env=extra_env,
            extra_args=[*extra_args, *(["--disaggregation-bootstrap-port", str(w.bootstrap_port)]
                                       if w.bootstrap_port else [])]) for w in planned])
        workers = [replace(w, url=url) for w, url in zip(planned, urls)]
        flags = pd_router_args(topology, [(w.url, w.bootstrap_port or 0) for w in workers
                                          if w.role == PREFILL],
                               [w.url for w in workers if w.role == DECODE])
        router_log = log_dir / f"{topology.name}-router.log"
        url = stack.enter_context(launched(router_profile(topology, flags), model=None,
                                           log_path=router_log, notify=notify,
                                           extra_env=extra_env))
        running = Topology(topology, url, router_log, workers)
        if topology.router != MINI_LB:  # MiniLB has no /workers: its health is all it says
            wait_for_workers(running, api_key)
        warm_up_pair(topology, url, [(w.label, w.log) for w in workers], api_key)
        if notify:
            notify(f"topology {topology.name}: sglang-router (PD {topology.router}, "
                   f"{topology.policy}) at {url} "
                   "over " + ", ".join(f"{w.label} {w.url}" + (
                       f" (bootstrap port {w.bootstrap_port})" if w.bootstrap_port else "")
                       for w in workers))
        yield RoutedURL(running)


def wait_for_workers(topology: Topology, api_key: str | None = None) -> None:
    """The router answers /health before it has registered its workers: wait until its /workers
    lists every one as healthy."""
    import urllib.request

    deadline = time.monotonic() + topology.profile.startup_timeout
    want = {w.url.rstrip("/") for w in topology.workers}
    seen: set[str] = set()
    while time.monotonic() < deadline:
        if http_status("GET", topology.router_url + "/health", timeout=5.0) == 200:
            try:
                request = urllib.request.Request(topology.router_url + "/workers")
                if api_key:
                    request.add_header("Authorization", f"Bearer {api_key}")
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                with opener.open(request, timeout=5.0) as resp:
                    listed = json.loads(resp.read()).get("workers", [])
                seen = {str(w.get("url", "")).rstrip("/") for w in listed if w.get("is_healthy")}
                if want <= seen:
                    return
            except (OSError, ValueError, AttributeError):
                pass
        time.sleep(0.25)
    raise ServerError(f"topology {topology.profile.name!r}: the router saw {len(seen & want)} of "
                      f"{len(want)} workers healthy within {topology.profile.startup_timeout:g} s "
                      f"(router log: {topology.router_log})")
