"""The findings run of real SGLang on a GPU (docs/findings/h200.md), in one command per backend.

    python scripts/gpu_sglang/run_matrix.py --plan h200 --backend fa3 --model DIR --out DIR
    python scripts/gpu_sglang/run_matrix.py --plan h200x2-tp2 --backend triton --model DIR --out DIR
    python scripts/gpu_sglang/run_matrix.py --plan cpu --model DIR --out DIR    # rehearsal here

Starts every server of the plan at once (the references, the HiCache profiles' control and each
HiCache profile or topology: the plans are in matrix_plans.py; one GPU holds them all, each with
a small pool), records the goldens on the references, replays each on every tested server with
the control (`--control-server`), then SGLang's id check, and stops them all. Everything goes
through the library exactly as `golden record` / `golden replay --control-server` would; the
equivalent command lines are written beside each report. Every server and this process run
with NVLink multicast off (matrix_plans.MULTICAST_OFF). Results: OUT/reports/*.json,
OUT/summary.json, a markdown table (OUT/table.md, also printed last) and the servers' logs in
OUT/logs/ (a topology's: OUT/logs/ROLE/, one per worker and the router's).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from matrix_plans import (  # noqa: E402
    MULTICAST_OFF, PLANS, Plan, Server, multicast_flags, replay_settings,
)

from replay.golden.scenario import build_plan, load_scenario  # noqa: E402
from replay.jobs.session import record_golden, replay_golden  # noqa: E402
from replay.run.recorder import RecordOptions  # noqa: E402
from replay.run.replayer import ReplayOptions  # noqa: E402
from replay.server.launch import launched  # noqa: E402
from replay.server.pd_topology import PDTopologyProfile  # noqa: E402
from replay.server.profile import load_profile  # noqa: E402
from replay.server.target import ServerTarget  # noqa: E402
from replay.server.topology import is_topology, launched_topology, load_topology  # noqa: E402
from replay.server.transport import ClientOptions  # noqa: E402


# Four servers started in the same second once collided: one's uvicorn port had meanwhile been
# taken by another's internal port ("[Errno 98] ... address already in use"), and that server
# then hung in "Waiting for application shutdown" instead of exiting. So: starts 4 s apart, a
# start that is not up in 240 s given up, and once retried.
STAGGER = 4.0
START_TIMEOUT = 240.0


class Rows(list):
    """The results, written to OUT/summary.json after every job and printed as one line each,
    so a run stopped at its time limit still leaves what it did."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def append(self, row: dict[str, Any]) -> None:  # type: ignore[override]
        super().append(row)
        self.path.write_text(json.dumps(list(self), indent=1))
        short = {k: row[k] for k in ("job", "verdict", "failed", "tier_only", "also_on_control",
                                     "max_ulp", "numerics_differing", "failing_workers",
                                     "error", "seconds", "exit") if k in row}
        print(json.dumps(short)[:400], flush=True)


@dataclass
class Fleet:
    """Servers started at once (each in a thread: a start waits for health and warm-up), all
    stopped at the end; a server that fails to start is reported and left out."""

    urls: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def start(self, servers: tuple[Server, ...], model: str, backend: str | None,
              logs: Path) -> None:
        def one(s: Server, delay: float) -> tuple[Server, Any, str]:
            time.sleep(delay)  # staggered: servers picking ports at once collided (see below)
            for attempt in (1, 2):  # a port another server took meanwhile: once more
                cm = launch_of(s, model, backend, logs, "" if attempt == 1 else "-retry")
                try:
                    return s, cm, cm.__enter__()
                except Exception:  # noqa: BLE001
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
            futures = {pool.submit(one, s, STAGGER * i): s for i, s in enumerate(servers)}
            for future in concurrent.futures.as_completed(futures):
                s = futures[future]
                try:
                    _, cm, url = future.result()
                except Exception as exc:  # noqa: BLE001 - reported, the others go on
                    self.errors[s.role] = " ".join(str(exc).split())[:600]
                    continue
                self.stack.push(lambda *exc, cm=cm: cm.__exit__(*exc))
                self.urls[s.role] = url

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def launch_of(s: Server, model: str, backend: str | None, logs: Path,
              suffix: str = "") -> contextlib.AbstractContextManager[str]:
    """The launch of one server of a plan (not started yet): a launch profile with the plan's
    start limit, or a topology (its workers' logs and the router's in logs/ROLE/, each worker
    with the start limit); NVLink multicast off in every process's environment."""
    if is_topology(s.profile):
        topology = replace(load_topology(s.profile), worker_startup_timeout=START_TIMEOUT)
        return launched_topology(topology, model=model, log_dir=logs / f"{s.role}{suffix}",
                                 extra_args=s.args, extra_env=MULTICAST_OFF,
                                 attention_backend=backend)
    profile = replace(load_profile(s.profile), startup_timeout=START_TIMEOUT)
    return launched(profile, model=model, log_path=logs / f"{s.role}{suffix}.log",
                    extra_args=s.args, attention_backend=backend, extra_env=MULTICAST_OFF)


def server_words(s: Server) -> list[str]:
    """Every argv word a server of a plan starts with (a topology: its workers' and router's)."""
    if not is_topology(s.profile):
        return [*load_profile(s.profile).command, *s.args]
    topology = load_topology(s.profile)
    if isinstance(topology, PDTopologyProfile):
        workers, own = (topology.prefill_profile, topology.decode_profile), ()
    else:
        workers, own = (topology.worker_profile,), topology.worker_args
    return [*(w for name in workers for w in load_profile(name).command), *own,
            *topology.router_args, *s.args]


def plan_problems(plan: Plan, servers: tuple[Server, ...]) -> list[str]:
    """Why the plan must not start: a server that would turn NVLink multicast on, or fewer
    GPUs than it needs."""
    problems = [f"{s.role} ({s.profile}) would turn NVLink multicast on: {' '.join(flags)}"
                for s in servers if (flags := multicast_flags(server_words(s)))]
    if plan.gpus and (seen := gpu_count()) < plan.gpus:
        problems.append(f"the plan needs {plan.gpus} GPU(s), nvidia-smi lists {seen} (a two-GPU "
                        "plan runs on the nvidia-h200-x2 kind: docs/gpu.md, \"Two GPUs\")")
    return problems


def gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60,
                          check=False)
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU "))


def command_line(kind: str, golden: Path, role: str, extra: list[str]) -> str:
    return f"golden {kind} {golden} --server <{role}> " + " ".join(extra)


def record_all(plan: Plan, fleet: Fleet, out: Path, rows: list[dict[str, Any]]) -> dict[str, Path]:
    made: dict[str, Path] = {}
    for g in plan.goldens:
        url = fleet.urls.get(g.on)
        if url is None:
            rows.append({"job": f"record {g.name}", "error": f"no {g.on} server"})
            continue
        path = out / "goldens" / f"{g.name}.zarr"
        options = RecordOptions(schedule=g.order[0] if g.order else "lockstep",
                                reference=g.reference)
        started = time.monotonic()
        try:
            golden = record_golden(build_plan(load_scenario(g.scenario)), path,
                                   ServerTarget(url=url), options, ClientOptions(), api="sglang",
                                   force=True)
            made[g.name] = path
            rows.append({"job": f"record {g.name}", "scenario": g.scenario, "on": g.on,
                         "reference": g.reference, "requests": golden.requests,
                         "seconds": round(time.monotonic() - started, 1),
                         "hits": sorted(golden.hits),
                         "misreported_prompt_ids": golden.meta.get("server_misreported_prompt_ids", 0)})
        except Exception as exc:  # noqa: BLE001
            rows.append({"job": f"record {g.name}", "error": " ".join(str(exc).split())[:600]})
    return made


def replay_all(plan: Plan, fleet: Fleet, goldens: dict[str, Path], out: Path,
               rows: list[dict[str, Any]]) -> None:
    control = fleet.urls.get(plan.control)
    for role, name, with_control in plan.replays():
        url, path = fleet.urls.get(role), goldens.get(name)
        if url is None or path is None:
            continue
        extra, flags = replay_settings(plan, role, name)
        options = ReplayOptions(**extra)
        twin = ServerTarget(url=control) if control and with_control else None
        flags += [f"--control-server <{plan.control}>"] if twin else []
        started = time.monotonic()
        doc = replay_golden(path, ServerTarget(url=url), options,
                            ClientOptions(concurrency=1 if name in plan.prompt_only else 16),
                            api="sglang", control=twin, name=name)
        report = out / "reports" / f"{role}__{name}.json"
        report.write_text(json.dumps(doc, indent=1))
        rows.append(row_of(role, name, doc, time.monotonic() - started,
                           command_line("replay", path, role, flags)))


def row_of(role: str, golden: str, doc: dict[str, Any], seconds: float, cmd: str) -> dict[str, Any]:
    s = doc.get("summary") or {}
    control = doc.get("control") or {}
    failing = [r for r in doc.get("requests", []) if not r["passed"]]
    firsts = sorted({(r.get("first_divergence") or {}).get("position") for r in failing
                     if r.get("first_divergence")} - {None})
    return {
        "job": f"replay {golden} on {role}", "server": role, "golden": golden,
        "verdict": doc["verdict"], "error": doc.get("error"),
        "requests": s.get("requests"), "repeats": s.get("repeats"),
        "failed": s.get("requests_failed"), "cache_misses": s.get("cache_misses"),
        "max_ulp": s.get("max_ulp"), "hit_lengths": s.get("cache_hit_lengths"),
        "tiers": s.get("cached_tokens_by_tier"), "first_positions": firsts[:6],
        "tier_only": control.get("failed_on_tier_only"),
        "also_on_control": control.get("failed_on_control_too"),
        "same_bits": control.get("same_bits_on_control"),
        "control_verdict": control.get("verdict"),
        "server_id_mismatches": s.get("server_id_mismatches"),
        "numerics_differing": (doc.get("numerics") or {}).get("differing"),
        **routing_of(doc),
        "seconds": round(seconds, 1), "command": cmd,
    }


def routing_of(doc: dict[str, Any]) -> dict[str, Any]:
    """Through a topology: who served what (the report's `routing`, docs/report.md)."""
    routing = doc.get("routing")
    if not routing:
        return {}
    keep = ("index", "requests", "failed", "expected_hits", "hits_met", "cached_tokens")
    return {"hit_rate": routing.get("hit_rate"), "routing_misses": routing.get("routing_misses"),
            "failing_workers": routing.get("failing_workers"),
            "per_worker": [{k: w.get(k) for k in keep} for w in routing.get("per_worker", [])]}


def per_worker_cell(r: dict[str, Any]) -> str:
    """`w0 18 (0 failed, hits 12/12); w1 9 (...)`, hit rate and routing misses; `-` for one server."""
    if "per_worker" not in r:
        return "-"
    each = "; ".join(f"w{w['index']} {w['requests']} ({w['failed']} failed, hits "
                     f"{w['hits_met']}/{w['expected_hits']})" for w in r["per_worker"])
    return f"{each}; hit rate {r['hit_rate']}, routing misses {r['routing_misses']}"


def id_check(plan: Plan, fleet: Fleet, rows: list[dict[str, Any]]) -> None:
    url = fleet.urls.get(plan.id_check)
    if url is None:
        return
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "sglang_last_id_repro.py"),
                           url, str(plan.vocab)], capture_output=True, text=True, timeout=120)
    rows.append({"job": f"id check on {plan.id_check}", "exit": done.returncode,
                 "output": (done.stdout + done.stderr).strip()})


def sglang_determinism(fleet: Fleet, role: str, rows: list[dict[str, Any]]) -> None:
    """SGLang's own determinism test (its prefix mode, with logprobs) on the same server."""
    url = fleet.urls.get(role)
    if url is None:
        return
    port = url.rsplit(":", 1)[1]
    cmd = [sys.executable, "-m", "sglang.test.test_deterministic", "--test-mode", "prefix",
           "--n-start", "1", "--n-trials", "8", "--return-logprob", "--port", port]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
        text, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        text, code = f"timed out after 150 s: {(exc.stdout or b'')[-2000:]!r}", 124
    keep = [ln for ln in text.splitlines() if any(k in ln for k in (
        "Prompt", "identical", "mismatch", "differ", "Error", "error", "Trial 8"))]
    rows.append({"job": f"sglang test_deterministic prefix on {role}", "exit": code,
                 "command": " ".join(cmd[1:]), "lines": keep[-30:], "tail": text[-1500:]})


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| server | golden | verdict | failed | tier's alone | also on control (same bits) "
             "| max ulp | hit lengths | tokens by tier | first positions | numerics differing "
             "| per worker | s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "server" not in r:
            continue
        if r.get("error") and r["verdict"] == "error":
            lines.append(f"| {r['server']} | {r['golden']} | error | {r['error'][:140]} |"
                         " | | | | | | | | |")
            continue
        also = f"{r['also_on_control']} ({r['same_bits']})" if r["also_on_control"] is not None else "-"
        tier = r["tier_only"] if r["tier_only"] is not None else "-"
        lines.append(f"| {r['server']} | {r['golden']} | {r['verdict']} | {r['failed']}/"
                     f"{r['requests'] * r['repeats']} | {tier} | {also} | {r['max_ulp']} | "
                     f"{r['hit_lengths']} | {r['tiers']} | {r['first_positions']} | "
                     f"{', '.join(r['numerics_differing'] or []) or '-'} | {per_worker_cell(r)} | "
                     f"{r['seconds']} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", choices=sorted(PLANS), required=True)
    ap.add_argument("--backend", default=None, help="attention backend (GPU plans)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--roles", default=None, help="only these server roles (comma-separated)")
    ap.add_argument("--sglang-determinism", default=None, metavar="ROLE",
                    help="also run SGLang's own determinism test (prefix mode) on this server")
    args = ap.parse_args()
    plan = PLANS[args.plan]
    servers = plan.servers
    if args.roles:
        keep = set(args.roles.split(","))
        servers = tuple(s for s in servers if s.role in keep)
    problems = plan_problems(plan, servers)
    if problems:
        print("run_matrix: not started: " + "; ".join(problems), file=sys.stderr)
        return 2
    os.environ.update(MULTICAST_OFF)  # the id check, SGLang's test, anything started from here
    for sub in ("reports", "goldens", "logs"):
        (args.out / sub).mkdir(parents=True, exist_ok=True)
    rows = Rows(args.out / "summary.json")
    started = time.monotonic()
    with Fleet() as fleet:
        fleet.start(servers, args.model, args.backend, args.out / "logs")
        rows.append({"job": "start", "seconds": round(time.monotonic() - started, 1),
                     "up": sorted(fleet.urls), "failed": fleet.errors})
        print(f"servers up after {rows[0]['seconds']} s: {sorted(fleet.urls)}; "
              f"failed: {fleet.errors}", flush=True)
        goldens = record_all(plan, fleet, args.out, rows)
        replay_all(plan, fleet, goldens, args.out, rows)
        id_check(plan, fleet, rows)
        if args.sglang_determinism:
            sglang_determinism(fleet, args.sglang_determinism, rows)
    rows.append({"job": "total", "seconds": round(time.monotonic() - started, 1)})
    text = table(rows)
    (args.out / "table.md").write_text(text + "\n")
    print(text)
    for r in rows:
        if "server" not in r:
            print(json.dumps(r)[:800])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
